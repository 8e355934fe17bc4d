//! A cluster at the Kubernetes scalability limits on one machine (issue 28):
//! kube-apiserver filled with N Nodes, N × P Pods bound to them, Services
//! with EndpointSlices, ConfigMaps and Secrets ([`objects`], [`load`]), then,
//! side by side in one run, straight at kube-apiserver and through one
//! watchmux tier caching all of it:
//!
//! - `memory`: watchmux's resident memory per cached object, by the JSON
//!   bytes it holds, against kube-apiserver's heap and RSS growth for the
//!   same objects (measured from before the load);
//! - `list`: C clients at once LIST every pod, JSON and protobuf, with and
//!   without gzip ([`biglist`]);
//! - `storm`: K kubelet-shaped clients started at once, watch-list and
//!   classic ([`storm`]): time until each is synced, kube-apiserver's CPU,
//!   peak RSS, Go heap and the requests it served, watchmux's CPU and RSS;
//!   then, the kubelets still watching, a churn phase ([`churn`]: 1% of the
//!   pods a minute and their EndpointSlices, `SCALE_CHURN_SECONDS`, 60; 0
//!   for none): both servers' CPU and whether every event arrived; then,
//!   with `SCALE_RESTART_CMD`, kube-apiserver restarted under them: who lost
//!   their watches, how long until they were synced again, what the new
//!   kube-apiserver served and spent. The storm's sides are (a) `direct`,
//!   (b) `watchmux` (the tier) and (c) `nodelocal` ([`nodelocal`]: the
//!   first nodes' kubelets behind node-local watchmux processes in front of
//!   the tier, the rest simulated).
//!
//! Environment: `SCALE_NODES` (5000), `SCALE_PODS_PER_NODE` (30),
//! `SCALE_SERVICES` (1000), `SCALE_NAMESPACES` (100, must divide the
//! services), `SCALE_PER_NAMESPACE` (10 ConfigMaps and 10 Secrets),
//! `SCALE_PHASES` (`load,memory,list,storm`), `SCALE_LOAD_IN_FLIGHT` (128),
//! `SCALE_KUBELETS` (the nodes), `SCALE_STORM_MODES` (`watch-list,classic`),
//! `SCALE_SIDES` (`direct,watchmux`; `nodelocal` too for side (c)), `SCALE_LIST_CLIENTS` (10),
//! `SCALE_CONNECTS` (handshakes in flight, 512), `SCALE_STARTS` (kubelets
//! connecting and syncing at once, unbounded: a storm), `SCALE_RELEASE_SECONDS`
//! (how long after a storm the tier's RSS is followed, 0), `SCALE_WATCHMUX_BASE_RSS`
//! (bytes of an empty watchmux, from the script), `SCALE_BASELINE` (where the
//! load records kube-apiserver's memory before it), and the `WATCHMUX_BENCH_*`
//! variables every bench reads; `BENCH_OUT` for the JSON.

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

#[path = "../common/mod.rs"]
mod common;

mod biglist;
mod churn;
mod load;
mod nodelocal;
mod objects;
mod storm;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use common::api::Api;
use common::client::{SideKind, Target};
use common::env::{env_list, env_or, write_results};
use common::procfs::{cpu_ticks, rss_bytes, ticks_ms};
use common::prom;
use common::sampler::PeakRss;
use objects::World;

const MIB: f64 = 1024.0 * 1024.0;
/// How long after the last kubelet synced the tier's RSS is read again: the
/// storm's last answers flushed, its kubelets idle on their watches.
const SETTLE: Duration = Duration::from_secs(5);
/// How often the tier's RSS is read while `SCALE_RELEASE_SECONDS` last.
const RELEASE_STEP: Duration = Duration::from_secs(5);

/// p50, p99 and max of some figures (0 when there are none).
fn p50_p99_max(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v.get(((v.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
    (at(0.5), at(0.99), v.last().copied().unwrap_or(0.0))
}

/// kube-apiserver's Go heap in use and its RSS, bytes.
async fn apiserver_memory(api: &Api) -> anyhow::Result<(f64, u64)> {
    let text = api.apiserver_metrics().await?;
    Ok((prom::sum(&text, "go_memstats_heap_inuse_bytes", &[]), rss_bytes(api.apiserver_pid()?)?))
}

/// The collections the tier caches, with their kind for the report.
const COLLECTIONS: [(&str, &str); 6] = [
    ("pods", "/api/v1/pods"),
    ("nodes", "/api/v1/nodes"),
    ("services", "/api/v1/services"),
    ("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices"),
    ("configmaps", "/api/v1/configmaps"),
    ("secrets", "/api/v1/secrets"),
];

async fn memory(api: &Api, base_rss: Option<u64>, baseline: &Value) -> anyhow::Result<Value> {
    let mut kinds = Vec::new();
    let (mut objects, mut json_bytes) = (0u64, 0u64);
    for (kind, path) in COLLECTIONS {
        let (status, body) = api.send(Method::GET, &format!("{path}?resourceVersion=0"), None, Bytes::new()).await?;
        if !status.is_success() {
            bail!("LIST {path}: {status}");
        }
        let list: Value = serde_json::from_slice(&body)?;
        let n = list["items"].as_array().map_or(0, Vec::len) as u64;
        // Bytes of the items as JSON (what watchmux holds per object), not the list's envelope.
        let bytes: u64 =
            list["items"].as_array().map_or(0, |items| items.iter().map(|o| o.to_string().len() as u64).sum());
        objects += n;
        json_bytes += bytes;
        kinds.push(json!({"kind": kind, "objects": n, "json_bytes": bytes,
            "bytes_per_object": bytes.checked_div(n).unwrap_or(0)}));
    }
    let (heap, api_rss) = apiserver_memory(api).await?;
    let wm_pid: u32 = common::env::env("WATCHMUX_BENCH_PROXY_PID")?.parse()?;
    let wm_rss = rss_bytes(wm_pid)?;
    // Protobuf clients make watchmux encode (and keep) a protobuf form of
    // each object it serves them; one LIST of every pod shows that cost.
    let target = api.proxy_target()?;
    let conn = target.connect(common::client::Shape::H2).await?;
    let mut req = target.request(common::client::Shape::H2, "/api/v1/pods?resourceVersion=0");
    req.headers_mut().insert("accept", http::HeaderValue::from_static("application/vnd.kubernetes.protobuf"));
    let resp = conn.send(req).await?;
    http_body_util::BodyExt::collect(resp.into_body()).await?;
    let wm_rss_pb = rss_bytes(wm_pid)?;
    let heap0 = baseline["apiserver_heap_inuse"].as_f64();
    let rss0 = baseline["apiserver_rss"].as_u64();
    let per_obj = |grown: f64| if objects > 0 { grown / objects as f64 } else { 0.0 };
    let wm_grown = base_rss.map(|b| wm_rss as f64 - b as f64);
    let out = json!({
        "objects": objects, "json_bytes": json_bytes, "kinds": kinds,
        "watchmux_rss_empty": base_rss, "watchmux_rss": wm_rss, "watchmux_rss_after_protobuf_list": wm_rss_pb,
        "watchmux_bytes_per_object": wm_grown.map(per_obj),
        "watchmux_rss_over_json": wm_grown.map(|g| g / json_bytes.max(1) as f64),
        "apiserver_heap_inuse_before": heap0, "apiserver_heap_inuse": heap,
        "apiserver_rss_before": rss0, "apiserver_rss": api_rss,
        "apiserver_heap_bytes_per_object": heap0.map(|h0| per_obj(heap - h0)),
        "apiserver_rss_bytes_per_object": rss0.map(|r0| per_obj(api_rss as f64 - r0 as f64)),
    });
    println!("\n### Memory for {objects} objects ({:.1} MiB of JSON)\n", json_bytes as f64 / MIB);
    println!("| kind | objects | JSON bytes per object |\n|---|---|---|");
    for k in out["kinds"].as_array().into_iter().flatten() {
        println!("| {} | {} | {} |", k["kind"].as_str().unwrap_or(""), k["objects"], k["bytes_per_object"]);
    }
    println!();
    println!("| | growth, MiB | bytes per object | × the JSON |\n|---|---|---|---|");
    if let Some(g) = wm_grown {
        println!(
            "| watchmux RSS (from an empty watchmux) | {:.1} | {:.0} | {:.2} |",
            g / MIB,
            per_obj(g),
            g / json_bytes as f64
        );
        let gp = wm_rss_pb as f64 - base_rss.unwrap_or(0) as f64;
        println!(
            "| watchmux RSS after a protobuf LIST of every pod | {:.1} | {:.0} | {:.2} |",
            gp / MIB,
            per_obj(gp),
            gp / json_bytes as f64
        );
    }
    if let Some(h0) = heap0 {
        let g = heap - h0;
        println!(
            "| kube-apiserver Go heap in use (from before the load) | {:.1} | {:.0} | {:.2} |",
            g / MIB,
            per_obj(g),
            g / json_bytes as f64
        );
    }
    if let Some(r0) = rss0 {
        let g = api_rss as f64 - r0 as f64;
        println!(
            "| kube-apiserver RSS (from before the load) | {:.1} | {:.0} | {:.2} |",
            g / MIB,
            per_obj(g),
            g / json_bytes as f64
        );
    }
    Ok(out)
}

async fn lists(api: &Api, sides: &[SideKind], clients: usize) -> anyhow::Result<Value> {
    let mut out = Vec::new();
    println!("\n### LIST of every pod, {clients} clients at once (resourceVersion=0)\n");
    println!(
        "| side | format | gzip asked | answer on the wire, MiB (encoding) | latency p50 / max, ms | server CPU, ms | server RSS peak growth, MiB (× one answer) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &side in sides {
        let (target, pid) = side_target(api, side)?;
        for format in ["json", "protobuf"] {
            let mut identity_bytes = 0u64;
            for gzip in [false, true] {
                let r = biglist::run(&target, pid, format, gzip, clients).await?;
                if r.content_encoding.is_none() {
                    identity_bytes = r.wire_bytes;
                }
                let (p50, _, max) = p50_p99_max(&r.latency_ms);
                let growth = r.server_rss_peak as f64 - r.server_rss_before as f64;
                println!(
                    "| {} | {format} | {} | {:.1} ({}) | {p50:.0} / {max:.0} | {:.0} | {:.1} ({:.2}) |",
                    side.title(),
                    if gzip { "yes" } else { "no" },
                    r.wire_bytes as f64 / MIB,
                    r.content_encoding.as_deref().unwrap_or("identity"),
                    r.server_cpu_ms,
                    growth / MIB,
                    growth / identity_bytes.max(1) as f64,
                );
                out.push(json!({"side": side.name(), "format": format, "gzip": gzip, "clients": clients,
                    "latency_ms": r.latency_ms, "wire_bytes": r.wire_bytes, "content_encoding": r.content_encoding,
                    "server_cpu_ms": r.server_cpu_ms, "server_rss_before": r.server_rss_before,
                    "server_rss_peak": r.server_rss_peak}));
                // Let the allocator give back before the next run measures its growth.
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }
    }
    Ok(Value::Array(out))
}

/// Where a storm's kubelets go: issue 28's sides (a), (b) and (c).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum StormSide {
    Direct,
    Tier,
    /// The first nodes behind node-locals of their own in front of the tier.
    NodeLocal,
}

impl std::str::FromStr for StormSide {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "direct" => Ok(StormSide::Direct),
            "watchmux" => Ok(StormSide::Tier),
            "nodelocal" => Ok(StormSide::NodeLocal),
            other => bail!("SCALE_SIDES: {other:?} is direct, watchmux or nodelocal"),
        }
    }
}

impl StormSide {
    fn name(self) -> &'static str {
        match self {
            StormSide::Direct => "direct",
            StormSide::Tier => "watchmux",
            StormSide::NodeLocal => "nodelocal",
        }
    }

    fn title(self) -> &'static str {
        match self {
            StormSide::Direct => "direct",
            StormSide::Tier => "through watchmux",
            StormSide::NodeLocal => "node-locals → watchmux",
        }
    }

    /// The server the kubelets that have no node-local ask.
    fn kind(self) -> SideKind {
        match self {
            StormSide::Direct => SideKind::Direct,
            StormSide::Tier | StormSide::NodeLocal => SideKind::Watchmux,
        }
    }
}

/// Where a side's requests go and the pid of the process serving them.
fn side_target(api: &Api, side: SideKind) -> anyhow::Result<(Target, u32)> {
    Ok(match side {
        SideKind::Direct => (api.api_target.clone(), api.apiserver_pid()?),
        SideKind::Watchmux => {
            (api.proxy_target()?, common::env::env("WATCHMUX_BENCH_PROXY_PID")?.parse().context("proxy pid")?)
        }
    })
}

async fn storms(api: &Api, w: World, sides: &[StormSide]) -> anyhow::Result<Value> {
    let kubelets: usize = env_or("SCALE_KUBELETS", w.nodes)?;
    let connects: usize = env_or("SCALE_CONNECTS", 512)?;
    let limit = Duration::from_secs(env_or("SCALE_STORM_TIMEOUT", 900)?);
    let modes: Vec<String> = env_list("SCALE_STORM_MODES", "watch-list,classic")?;
    let churn_for = Duration::from_secs(env_or("SCALE_CHURN_SECONDS", 60)?);
    let release_for = Duration::from_secs(env_or("SCALE_RELEASE_SECONDS", 0)?);
    let churn_rate: f64 = env_or("SCALE_CHURN_PODS_PER_MINUTE_PERCENT", 1.0)?;
    let mut churn_first = 0usize;
    let mut churns = Vec::new();
    // kube-apiserver restarted under the synced kubelets (bench-scale.sh
    // names the command: cluster-up.sh --restart-apiserver).
    let restart_cmd = std::env::var("SCALE_RESTART_CMD").ok().filter(|c| !c.is_empty());
    let restart_window = Duration::from_secs(env_or("SCALE_RESTART_WINDOW_SECONDS", 60)?);
    let mut restarts = Vec::new();
    let wm_pid: Option<u32> = std::env::var("WATCHMUX_BENCH_PROXY_PID").ok().and_then(|v| v.parse().ok());
    let mut out = Vec::new();
    println!("\n### Kubelet storm: {kubelets} kubelets × 5 collections, started at once\n");
    println!(
        "| mode | side | synced / failed | time to synced p50 / p99 / max, s | 429s | kube-apiserver CPU, s | kube-apiserver peak RSS growth / heap after, MiB | LISTs / GETs kube-apiserver served, WATCHes it holds | watchmux CPU, s / peak RSS / RSS settled, MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for mode in &modes {
        let mode = match mode.as_str() {
            "classic" => storm::Mode::Classic,
            "watch-list" => storm::Mode::WatchList,
            other => bail!("SCALE_STORM_MODES: {other:?} is classic or watch-list"),
        };
        for &side in sides {
            let (target, _) = side_target(api, side.kind())?;
            let tiered = side != StormSide::Direct;
            let api_pid = api.apiserver_pid()?;
            let before = api.apiserver_metrics().await?;
            let watches0 = prom::sum(&before, "apiserver_longrunning_requests", &[("verb", "WATCH")]);
            let (api_cpu0, api_rss0) = (cpu_ticks(api_pid)?, rss_bytes(api_pid)?);
            let wm_cpu0 = wm_pid.map(cpu_ticks).transpose()?;
            let wm_rss0 = wm_pid.map(rss_bytes).transpose()?;
            let wm_before = if tiered { api.watchmux_metrics().await.ok() } else { None };
            let api_peak = PeakRss::start(api_pid);
            let wm_peak = wm_pid.map(PeakRss::start);
            // Side (c): the node-locals start cold at the storm's instant.
            let mut locals = match side {
                StormSide::NodeLocal => {
                    Some(nodelocal::NodeLocals::start(&nodelocal::Config::from_env()?, &w, &target)?)
                }
                _ => None,
            };
            let local_targets = locals.as_ref().map(|l| l.targets.clone()).unwrap_or_default();
            let s = storm::Storm::start(w, target, local_targets, mode, kubelets, connects);
            let all = s.wait_synced(limit).await;
            let local = match &mut locals {
                Some(l) => {
                    let (p50, p99, max) = p50_p99_max(&s.tally.local_synced_ms.lock());
                    let synced = s.tally.local_synced_ms.lock().len();
                    let v = json!({"count": l.targets.len(), "watch_list": l.watch_list, "alive": l.alive(), "synced": synced,
                        "synced_ms": {"p50": p50, "p99": p99, "max": max}, "cpu_s": l.cpu_s(),
                        "max_rss": l.max_rss(), "refused": s.tally.local_refused.load(Ordering::Relaxed)});
                    v
                }
                None => Value::Null,
            };
            let api_cpu = ticks_ms(cpu_ticks(api_pid)? - api_cpu0) / 1e3;
            let wm_cpu = match (wm_pid, wm_cpu0) {
                (Some(p), Some(c0)) => Some(ticks_ms(cpu_ticks(p)? - c0) / 1e3),
                _ => None,
            };
            let after = api.apiserver_metrics().await?;
            let api_peak = api_peak.finish().await;
            let wm_peak = match wm_peak {
                Some(p) => Some(p.finish().await),
                None => None,
            };
            // What the tier keeps once the storm is over and its kubelets sit
            // on their watches: the peak's transient buffers should be gone.
            let wm_settled = match wm_pid {
                Some(p) if tiered => {
                    tokio::time::sleep(SETTLE).await;
                    Some(rss_bytes(p)?)
                }
                _ => None,
            };
            // And whether the allocator gives the storm's memory back: the
            // RSS every few seconds for SCALE_RELEASE_SECONDS more (0: not
            // watched), the kubelets still on their watches.
            let mut wm_release = Vec::new();
            if let (Some(p), true) = (wm_pid, tiered) {
                let mut waited = SETTLE;
                while waited < release_for {
                    tokio::time::sleep(RELEASE_STEP).await;
                    waited += RELEASE_STEP;
                    wm_release.push(json!({"s": waited.as_secs(), "rss": rss_bytes(p)?}));
                }
            }
            let heap = prom::sum(&after, "go_memstats_heap_inuse_bytes", &[]);
            // A WATCH is counted in apiserver_request_total when it ends: the
            // ones held are the long-running gauge.
            let watches = prom::sum(&after, "apiserver_longrunning_requests", &[("verb", "WATCH")]);
            let served = prom::delta(
                &prom::by_label(&before, "apiserver_request_total", "verb", &[]),
                &prom::by_label(&after, "apiserver_request_total", "verb", &[]),
            );
            // `+ 0.0`: an empty float sum is -0.0, printed as "-0".
            let verb = |v: &str| served.iter().filter(|(k, _)| k == v).map(|(_, n)| *n).sum::<f64>() + 0.0;
            // Why reads through watchmux reached kube-apiserver, from its own metrics.
            let why = match &wm_before {
                Some(b) => {
                    let a = api.watchmux_metrics().await?;
                    let d = |name: &str, key: &str| {
                        prom::delta(&prom::by_label(b, name, key, &[]), &prom::by_label(&a, name, key, &[]))
                    };
                    json!({"passthrough_by_reason": d("watchmux_cache_passthrough_total", "reason"),
                        "consistent_reads_by_result": d("watchmux_watch_cache_consistent_read_total", "result")})
                }
                None => Value::Null,
            };
            let t = &s.tally;
            let synced = t.synced_ms.lock().clone();
            let (p50, p99, max) = p50_p99_max(&synced);
            let failed = t.failed.load(Ordering::Relaxed);
            println!(
                "| {} | {} | {} / {failed}{} | {:.1} / {:.1} / {:.1} | {} | {api_cpu:.1} | {:.0} / {:.0} | {:.0} / {:.0}, {:.0} → {:.0} | {} |",
                mode.name(),
                side.title(),
                synced.len(),
                if all { "" } else { " (timed out)" },
                p50 / 1e3,
                p99 / 1e3,
                max / 1e3,
                t.refused_429.load(Ordering::Relaxed),
                (api_peak as f64 - api_rss0 as f64) / MIB,
                heap / MIB,
                verb("LIST"),
                verb("GET"),
                watches0,
                watches,
                match (wm_cpu, wm_peak, wm_settled) {
                    (Some(c), Some(p), Some(r)) => format!("{c:.1} / {:.0} / {:.0}", p as f64 / MIB, r as f64 / MIB),
                    _ => "–".into(),
                },
            );
            if let Some(e) = t.first_error.lock().as_ref() {
                println!("\n(first failure: {e})\n");
            }
            if !local.is_null() {
                let secs = |q: &str| local["synced_ms"][q].as_f64().unwrap_or(0.0) / 1e3;
                println!(
                    "\n({} node-locals ({}), {} still running: their {} kubelets synced p50 / p99 / max {:.1} / {:.1} / {:.1} s, {} connections refused before they listened; the node-locals' CPU {:.1} s in all, the largest RSS {:.0} MiB)\n",
                    local["count"],
                    if local["watch_list"] == true { "watch-lists" } else { "paginated LISTs" },
                    local["alive"],
                    local["synced"],
                    secs("p50"),
                    secs("p99"),
                    secs("max"),
                    local["refused"],
                    local["cpu_s"].as_f64().unwrap_or(0.0),
                    local["max_rss"].as_f64().unwrap_or(0.0) / MIB
                );
            }
            let retries = t.watch_list_retries.load(Ordering::Relaxed);
            if retries > 0 {
                println!(
                    "\n({retries} watch-lists ended in the 504 Too large resource version and were asked again)\n"
                );
            }
            let fallbacks = t.watch_list_fallbacks.load(Ordering::Relaxed);
            if fallbacks > 0 {
                println!("\n({fallbacks} watch-lists ended in another ERROR event and fell back to LIST and WATCH)\n");
            }
            if !why.is_null() {
                println!(
                    "\n(watchmux: passed through by reason {}; consistent reads by result {})\n",
                    why["passthrough_by_reason"], why["consistent_reads_by_result"]
                );
            }
            out.push(json!({"mode": mode.name(), "side": side.name(), "kubelets": kubelets,
                "synced": synced.len(), "failed": failed, "all_done": all,
                "synced_ms": {"p50": p50, "p99": p99, "max": max},
                "refused_429": t.refused_429.load(Ordering::Relaxed),
                "watch_list_retries": retries, "watch_list_fallbacks": fallbacks,
                "initial_bytes": t.initial_bytes.load(Ordering::Relaxed),
                "apiserver_cpu_s": api_cpu, "apiserver_rss_before": api_rss0, "apiserver_rss_peak": api_peak,
                "apiserver_heap_inuse_after": heap, "apiserver_requests": served,
                "apiserver_watches_before": watches0, "apiserver_watches_synced": watches,
                "watchmux_cpu_s": wm_cpu, "watchmux_rss_before": wm_rss0, "watchmux_rss_peak": wm_peak,
                "watchmux_rss_settled": wm_settled, "watchmux_rss_release": wm_release,
                "watchmux_reads": why, "node_locals": local}));
            if !churn_for.is_zero() {
                let (api_cpu0, wm_cpu0) = (cpu_ticks(api_pid)?, wm_pid.map(cpu_ticks).transpose()?);
                let events0 = t.live_events.load(Ordering::Relaxed);
                let watched = t.synced_nodes.lock().clone();
                let c = churn::run(api, w, &watched, churn_for, churn_rate, churn_first).await?;
                churn_first += c.pod_writes as usize;
                // The last events' way to the kubelets.
                tokio::time::sleep(Duration::from_secs(2)).await;
                let api_cpu = ticks_ms(cpu_ticks(api_pid)? - api_cpu0) / 1e3;
                let wm_cpu = match (wm_pid, wm_cpu0) {
                    (Some(p), Some(c0)) if tiered => Some(ticks_ms(cpu_ticks(p)? - c0) / 1e3),
                    _ => None,
                };
                let events = t.live_events.load(Ordering::Relaxed) - events0;
                churns.push(json!({"mode": mode.name(), "side": side.name(), "seconds": c.seconds,
                    "pod_writes": c.pod_writes, "slice_writes": c.slice_writes,
                    "expected_pod_events": c.expected_pod_events, "kubelet_events": events,
                    "apiserver_cpu_s": api_cpu, "watchmux_cpu_s": wm_cpu,
                    "streams_broken": t.streams_broken.load(Ordering::Relaxed)}));
            }
            if let Some(cmd) = &restart_cmd {
                restarts.push(restart(api, w, &s, cmd, restart_window, mode, side, synced.len()).await?);
            }
            s.stop().await;
            if let Some(l) = locals {
                l.stop().await;
            }
            // Let both servers tear the watches down before the next storm.
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }
    if !churns.is_empty() {
        println!(
            "\n### Churn: {churn_rate}% of the pods a minute and an EndpointSlice each, for {} s, the kubelets of each storm watching\n",
            churn_for.as_secs()
        );
        println!(
            "| after the storm | side | pod / EndpointSlice writes | events the kubelets got / expected | kube-apiserver CPU, s | watchmux CPU, s |"
        );
        println!("|---|---|---|---|---|---|");
        for c in &churns {
            println!(
                "| {} | {} | {} / {} | {} / {} | {:.1} | {} |",
                c["mode"].as_str().unwrap_or(""),
                c["side"].as_str().unwrap_or(""),
                c["pod_writes"],
                c["slice_writes"],
                c["kubelet_events"],
                c["expected_pod_events"],
                c["apiserver_cpu_s"].as_f64().unwrap_or(0.0),
                c["watchmux_cpu_s"].as_f64().map_or("–".to_owned(), |v| format!("{v:.1}")),
            );
        }
    }
    if !restarts.is_empty() {
        println!("\n### kube-apiserver restarted (SIGTERM, then started on the same etcd) under the synced kubelets\n");
        println!(
            "| after the storm | side | kubelets whose watches broke | synced again p50 / p99 / max, s after the restart (failed) | new kube-apiserver in the window: LISTs served / WATCHes held, CPU s | events after it: got / expected |"
        );
        println!("|---|---|---|---|---|---|");
        for r in &restarts {
            println!(
                "| {} | {} | {} | {} | {} / {}, {:.1} | {} / {} |",
                r["mode"].as_str().unwrap_or(""),
                r["side"].as_str().unwrap_or(""),
                r["broken"],
                if r["broken"].as_u64() == Some(0) {
                    "–".to_owned()
                } else {
                    format!(
                        "{:.1} / {:.1} / {:.1} ({})",
                        r["resynced_ms"]["p50"].as_f64().unwrap_or(0.0) / 1e3,
                        r["resynced_ms"]["p99"].as_f64().unwrap_or(0.0) / 1e3,
                        r["resynced_ms"]["max"].as_f64().unwrap_or(0.0) / 1e3,
                        r["resync_failed"]
                    )
                },
                r["lists"],
                r["watches"],
                r["apiserver_cpu_s"].as_f64().unwrap_or(0.0),
                r["events"],
                r["expected_events"],
            );
        }
    }
    Ok(json!({"storms": out, "churn": churns, "restarts": restarts}))
}

/// kube-apiserver restarted with `cmd` under a synced storm: how many
/// kubelets lost their watches, how long until each was synced again (within
/// `window` from the restart), what the new kube-apiserver served and spent
/// in that window, and whether a short churn after it reaches every kubelet.
#[allow(clippy::too_many_arguments)]
async fn restart(
    api: &Api,
    w: World,
    s: &storm::Storm,
    cmd: &str,
    window: Duration,
    mode: storm::Mode,
    side: StormSide,
    synced: usize,
) -> anyhow::Result<Value> {
    let t = &s.tally;
    let broken0 = t.streams_broken.load(Ordering::Relaxed);
    let began = std::time::Instant::now();
    *t.restarted_at.lock() = Some(began);
    let status = tokio::process::Command::new("bash").arg("-c").arg(cmd).status().await?;
    if !status.success() {
        bail!("{cmd}: {status}");
    }
    let up_after = began.elapsed();
    let api_pid = api.apiserver_pid()?;
    // The same window on both sides: what the new kube-apiserver spent and
    // served in it (its start included) is comparable.
    tokio::time::sleep((began + window).saturating_duration_since(std::time::Instant::now())).await;
    let api_cpu = ticks_ms(cpu_ticks(api_pid)?) / 1e3;
    let metrics = api.apiserver_metrics().await?;
    let served = prom::by_label(&metrics, "apiserver_request_total", "verb", &[]);
    let verb = |v: &str| served.iter().filter(|(k, _)| k == v).map(|(_, n)| *n).sum::<f64>() + 0.0;
    let watches = prom::sum(&metrics, "apiserver_longrunning_requests", &[("verb", "WATCH")]);
    // Do the kubelets get events again?
    let events0 = t.live_events.load(Ordering::Relaxed);
    let watched = t.synced_nodes.lock().clone();
    let c = churn::run(api, w, &watched, Duration::from_secs(10), 6.0, w.pods() / 2).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = t.live_events.load(Ordering::Relaxed) - events0;
    let resynced = t.resynced_ms.lock().clone();
    let (p50, p99, max) = p50_p99_max(&resynced);
    let broken = t.streams_broken.load(Ordering::Relaxed) - broken0;
    Ok(json!({"mode": mode.name(), "side": side.name(), "up_after_s": up_after.as_secs_f64(),
        "window_s": window.as_secs_f64(), "synced_before": synced,
        "broken": broken, "resynced": resynced.len(),
        "resync_failed": t.resync_failed.load(Ordering::Relaxed),
        "resynced_ms": {"p50": p50, "p99": p99, "max": max},
        "lists": verb("LIST"), "watches": watches, "apiserver_cpu_s": api_cpu,
        "events": events, "expected_events": c.expected_pod_events}))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let w = World {
        nodes: env_or("SCALE_NODES", 5000)?,
        pods_per_node: env_or("SCALE_PODS_PER_NODE", 30)?,
        services: env_or("SCALE_SERVICES", 1000)?,
        namespaces: env_or("SCALE_NAMESPACES", 100)?,
        per_namespace: env_or("SCALE_PER_NAMESPACE", 10)?,
    };
    if !w.services.is_multiple_of(w.namespaces) {
        bail!("SCALE_NAMESPACES ({}) must divide SCALE_SERVICES ({})", w.namespaces, w.services);
    }
    let phases: Vec<String> = env_list("SCALE_PHASES", "load,memory,list,storm")?;
    let sides: Vec<StormSide> = env_list("SCALE_SIDES", "direct,watchmux")?;
    // The LISTs have no node-local side: a node-local caches its node's pods.
    let list_sides: Vec<SideKind> = [SideKind::Direct, SideKind::Watchmux]
        .into_iter()
        .filter(|k| sides.iter().any(|s| *s != StormSide::NodeLocal && s.kind() == *k))
        .collect();
    let api = Arc::new(Api::from_env()?);
    let baseline_path = std::env::var("SCALE_BASELINE").unwrap_or_else(|_| ".run/bench-scale/baseline.json".into());
    let mut result = json!({"scenario": "scale", "world": {"nodes": w.nodes, "pods": w.pods(),
        "services": w.services, "namespaces": w.namespaces, "per_namespace": w.per_namespace}});
    println!("## {} nodes, {} pods, {} services, {} namespaces", w.nodes, w.pods(), w.services, w.namespaces);
    if phases.iter().any(|p| p == "load") {
        let (heap, rss) = apiserver_memory(&api).await?;
        std::fs::write(&baseline_path, json!({"apiserver_heap_inuse": heap, "apiserver_rss": rss}).to_string())
            .with_context(|| format!("writing {baseline_path}"))?;
        let report = load::load(&api, w, env_or("SCALE_LOAD_IN_FLIGHT", 128)?).await?;
        println!("\n### Load\n\n| objects | writes | seconds | writes/s |\n|---|---|---|---|");
        for (kind, n, s) in &report {
            println!("| {kind} | {n} | {s:.1} | {:.0} |", *n as f64 / s);
        }
        result["load"] = json!(report);
    }
    let baseline: Value =
        std::fs::read_to_string(&baseline_path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null);
    if phases.iter().any(|p| p == "memory") {
        let base_rss = std::env::var("SCALE_WATCHMUX_BASE_RSS").ok().and_then(|v| v.parse().ok());
        result["memory"] = memory(&api, base_rss, &baseline).await?;
    }
    if phases.iter().any(|p| p == "list") {
        result["lists"] = lists(&api, &list_sides, env_or("SCALE_LIST_CLIENTS", 10)?).await?;
    }
    if phases.iter().any(|p| p == "storm") {
        let mut storms = storms(&api, w, &sides).await?;
        result["churn"] = storms["churn"].take();
        result["restarts"] = storms["restarts"].take();
        result["storms"] = storms["storms"].take();
    }
    write_results(&result)
}
