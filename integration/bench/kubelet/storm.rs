//! The LIST storm of issue 26 item 3: do the kubelets still sync while one
//! client runs `KUBELET_NOISY` (100) concurrent LISTs of every pod in a
//! loop, straight at kube-apiserver and through watchmux?
//!
//! Identities are those of a real cluster, so that the priority levels of
//! both sides (kube-apiserver's APF, watchmux's `--fairness-seats`) see them
//! as they would: every request carries the cluster's admin token and
//! impersonates the caller, a kubelet as `system:node:<node>` in
//! `system:nodes` (APF's `system-nodes` FlowSchema: levels `node-high` and
//! `system`), the noisy client as the ordinary user [`NOISY_USER`]
//! (`global-default`), allowed to list pods by a ClusterRoleBinding the
//! bench creates. watchmux runs in delegated mode (the script's part) and so
//! reviews each identity as the API server does.
//!
//! The noisy LISTs are of the cached kind (`resourceVersion=0`), of
//! `KUBELET_EXTRA_PODS` (10,000) pods created once in [`EXTRA_NS`] (reused
//! when already there) plus the kubelets' own, read in full and not parsed,
//! on one HTTP/2 connection; a 429 is retried after its `Retry-After`, as
//! client-go does. The storm starts [`WARMUP`] before the kubelets and stops
//! when every kubelet has synced (its five LISTs done and its five watches
//! open) or failed.
//!
//! Per side and condition (`KUBELET_CONDITIONS`, `quiet,noisy`): the
//! kubelets' time to synced (each from its own connection; at most
//! `START_CONCURRENCY` start at once, as in the main bench), their 429s, the
//! noisy LISTs completed and refused, and the CPU of kube-apiserver, watchmux
//! and the bench itself over the phase (the same two cores serve them all).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::common::api::Api;
use crate::common::client::{Sender, Shape, SideKind, Target};
use crate::common::procfs::{Sample, ticks_ms};
use crate::common::prom;
use crate::common::stats::{SideTable, fmt0, latency_json, p50_p99_max, thousands};
use crate::{Bench, retry_after};

/// Where the noisy client's extra pods live.
pub const EXTRA_NS: &str = "watchmux-bench-storm";
/// The ordinary user the noisy client acts as.
pub const NOISY_USER: &str = "watchmux-bench-noisy";
/// The storm runs this long before the kubelets start, to be at full strength.
const WARMUP: Duration = Duration::from_secs(3);
/// What the noisy client lists.
const NOISY_PATH: &str = "/api/v1/pods?resourceVersion=0";

/// The headers of a request as `user` in `groups`: the admin token (which
/// requests straight at kube-apiserver carry already) and the impersonation.
pub fn acting_as(target: &Target, admin: &HeaderValue, user: &str, groups: &[&str]) -> anyhow::Result<HeaderMap> {
    let mut h = HeaderMap::new();
    if matches!(target, Target::Proxy { .. }) {
        h.insert(http::header::AUTHORIZATION, admin.clone());
    }
    h.insert("impersonate-user", HeaderValue::from_str(user)?);
    for g in groups {
        h.append("impersonate-group", HeaderValue::from_str(g)?);
    }
    Ok(h)
}

/// A kubelet's identity: its node, in `system:nodes`.
pub fn as_node(target: &Target, admin: &HeaderValue, node: &str) -> anyhow::Result<HeaderMap> {
    acting_as(target, admin, &format!("system:node:{node}"), &["system:nodes", "system:authenticated"])
}

/// The extra pods (reused when there are enough) and the noisy user's right
/// to list pods.
pub async fn prepare(api: &Arc<Api>, extra: usize) -> anyhow::Result<()> {
    api.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
            "metadata":{"name":NOISY_USER},
            "rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]}]}),
    )
    .await?;
    api.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
            "metadata":{"name":NOISY_USER},
            "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":NOISY_USER},
            "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":NOISY_USER}]}),
    )
    .await?;
    api.ensure_namespace(EXTRA_NS).await?;
    let have = extra_pods(api).await?;
    if have >= extra {
        eprintln!("kubelet: {have} extra pods in {EXTRA_NS} already");
        return Ok(());
    }
    let t = Instant::now();
    let permits = Arc::new(Semaphore::new(64));
    let mut tasks = Vec::with_capacity(extra);
    for i in 0..extra {
        let (api, permits) = (api.clone(), permits.clone());
        tasks.push(tokio::spawn(async move {
            let _p = permits.acquire().await?;
            api.create(&format!("/api/v1/namespaces/{EXTRA_NS}/pods"), &extra_pod(i)).await
        }));
    }
    for t in tasks {
        t.await??;
    }
    eprintln!("kubelet: {extra} extra pods created in {:.1}s", t.elapsed().as_secs_f64());
    Ok(())
}

/// A pod of a workload, about 1 KiB of JSON, on no node of the bench.
fn extra_pod(i: usize) -> serde_json::Value {
    json!({"apiVersion":"v1","kind":"Pod",
        "metadata":{"name":format!("storm-pod-{i}"),
            "labels":{"app":format!("storm-{}", i % 100),"tier":"backend","release":"bench"}},
        "spec":{"containers":[{"name":"app","image":"registry.invalid/app:1.0",
            "args":["--listen=:8080","--log-level=info"],
            "env":[{"name":"MODE","value":"storm"},{"name":"INDEX","value":i.to_string()}],
            "ports":[{"containerPort":8080,"name":"http"}],
            "resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}})
}

/// How many pods [`EXTRA_NS`] holds.
async fn extra_pods(api: &Api) -> anyhow::Result<usize> {
    let (status, body) =
        api.send(Method::GET, &format!("/api/v1/namespaces/{EXTRA_NS}/pods?limit=1"), None, Default::default()).await?;
    if !status.is_success() {
        bail!("counting the extra pods: {status}");
    }
    let list: serde_json::Value = serde_json::from_slice(&body)?;
    let listed = list["items"].as_array().map_or(0, Vec::len);
    Ok(listed + list["metadata"]["remainingItemCount"].as_u64().unwrap_or(0) as usize)
}

#[derive(Default)]
struct NoisyCounts {
    ok: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
}

/// The noisy client: `loops` LISTs at once on one HTTP/2 connection, each
/// read in full and sent again, until `stop`.
async fn noisy(target: Target, headers: HeaderMap, loops: usize, counts: Arc<NoisyCounts>, stop: CancellationToken) {
    let conn = match target.connect(Shape::H2).await {
        Ok(c) => Arc::new(tokio::sync::Mutex::new(c)),
        Err(e) => {
            eprintln!("kubelet: the noisy client cannot connect: {e:#}");
            counts.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let one_loop = |conn: Arc<tokio::sync::Mutex<Sender>>| {
        let (target, headers, counts, stop) = (target.clone(), headers.clone(), counts.clone(), stop.clone());
        async move {
            while !stop.is_cancelled() {
                let sender = conn.lock().await.clone();
                let mut req = target.request(Shape::H2, NOISY_PATH);
                req.headers_mut().extend(headers.clone());
                let pause = match list_once(&sender, req, &counts).await {
                    Ok(None) => continue,
                    Ok(Some(wait)) => wait,
                    Err(_) => {
                        counts.errors.fetch_add(1, Ordering::Relaxed);
                        let mut c = conn.lock().await;
                        if c.is_closed()
                            && let Ok(fresh) = target.connect(Shape::H2).await
                        {
                            *c = fresh;
                        }
                        Duration::from_secs(1)
                    }
                };
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    };
    let loops: Vec<_> = (0..loops).map(|_| one_loop(conn.clone())).collect();
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = futures_util::future::join_all(loops) => {}
    }
}

/// One noisy LIST: `None` when read in full, the pause its 429 asks for.
async fn list_once(
    sender: &Sender,
    req: http::Request<http_body_util::Empty<bytes::Bytes>>,
    counts: &NoisyCounts,
) -> anyhow::Result<Option<Duration>> {
    let resp = sender.send(req).await?;
    match resp.status() {
        StatusCode::OK => {
            let mut body = resp.into_body();
            while let Some(frame) = body.frame().await {
                if let Some(data) = frame?.data_ref() {
                    counts.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
            }
            counts.ok.fetch_add(1, Ordering::Relaxed);
            Ok(None)
        }
        StatusCode::TOO_MANY_REQUESTS => {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            Ok(Some(retry_after(&resp)))
        }
        other => bail!("noisy LIST: {other}"),
    }
}

pub struct StormResult {
    kind: SideKind,
    noisy: bool,
    fairness: String,
    synced: usize,
    failed: usize,
    failure: Option<String>,
    all_synced_secs: f64,
    synced_in: Vec<Duration>,
    kubelet_429: usize,
    noisy_ok: u64,
    noisy_refused: u64,
    noisy_errors: u64,
    noisy_bytes: u64,
    phase_secs: f64,
    cpu: Sample,
    /// kube-apiserver's APF rejections over the phase, by priority level.
    apf_rejected: Vec<(String, f64)>,
}

impl Bench {
    /// One condition of one side: the kubelets start, with the storm or without.
    pub async fn run_storm(&self, kind: SideKind, noisy_on: bool) -> anyhow::Result<StormResult> {
        let api = &self.api;
        let api_pid = api.apiserver_pid()?;
        let (target, server_pid) = match kind {
            SideKind::Direct => (api.api_target.clone(), api_pid),
            SideKind::Watchmux => (api.proxy_target()?, self.proxy_pid),
        };
        let admin = match &api.api_target {
            Target::Direct { auth, .. } => auth.clone(),
            Target::Proxy { .. } => bail!("kube-apiserver's target has no token"),
        };
        tokio::time::sleep(crate::SETTLE).await;
        let rejected0 = apf_rejected(&api.apiserver_metrics().await?);
        let s0 = Sample::take(server_pid, api_pid)?;
        let t0 = Instant::now();
        let storm_stop = CancellationToken::new();
        let _storm_stop_on_drop = storm_stop.clone().drop_guard();
        let counts = Arc::new(NoisyCounts::default());
        let storm = noisy_on.then(|| {
            let headers = acting_as(&target, &admin, NOISY_USER, &["system:authenticated"]);
            let (target, counts, stop, loops) = (target.clone(), counts.clone(), storm_stop.clone(), self.noisy);
            tokio::spawn(async move {
                noisy(target, headers?, loops, counts, stop).await;
                anyhow::Ok(())
            })
        });
        if storm.is_some() {
            tokio::time::sleep(WARMUP).await;
            eprintln!(
                "kubelet: {kind:?} storm after {WARMUP:?}: {} LISTs read, {} refused",
                counts.ok.load(Ordering::Relaxed),
                counts.refused.load(Ordering::Relaxed)
            );
        }
        let start = self.start_kubelets(&target, |i| as_node(&target, &admin, &crate::node(i))).await?;
        // Read before the storm stops: the noisy LISTs still queued there
        // when it does are counted as rejected (`time-out`) too.
        let rejected1 = apf_rejected(&api.apiserver_metrics().await?);
        storm_stop.cancel();
        if let Some(s) = storm {
            s.await.context("the noisy client")??;
        }
        let cpu = s0.delta(&Sample::take(server_pid, api_pid)?);
        let phase_secs = t0.elapsed().as_secs_f64();
        let apf_rejected = prom::delta(&rejected0, &rejected1);
        if api.apiserver_pid()? != api_pid {
            bail!("kube-apiserver was restarted during the measurement");
        }
        start.stop.cancel();
        let mut failure = None;
        for t in start.tasks {
            for o in t.await? {
                if let Some(e) = o.error
                    && e != "Cancelled"
                {
                    failure.get_or_insert(e);
                }
            }
        }
        let mut synced_in = std::mem::take(&mut *start.shared.synced_in.lock());
        synced_in.sort();
        let synced = synced_in.len();
        eprintln!(
            "kubelet: {kind:?} {}: {synced} synced in {:.1}s",
            if noisy_on { "noisy" } else { "quiet" },
            start.secs
        );
        Ok(StormResult {
            kind,
            noisy: noisy_on,
            fairness: std::env::var("KUBELET_FAIRNESS_LABEL").unwrap_or_default(),
            synced,
            failed: self.m - synced,
            failure,
            all_synced_secs: start.secs,
            synced_in,
            kubelet_429: start.shared.refused_429.load(Ordering::Relaxed),
            noisy_ok: counts.ok.load(Ordering::Relaxed),
            noisy_refused: counts.refused.load(Ordering::Relaxed),
            noisy_errors: counts.errors.load(Ordering::Relaxed),
            noisy_bytes: counts.bytes.load(Ordering::Relaxed),
            phase_secs,
            cpu,
            apf_rejected,
        })
    }
}

fn apf_rejected(metrics: &str) -> Vec<(String, f64)> {
    prom::by_label(metrics, "apiserver_flowcontrol_rejected_requests_total", "priority_level", &[])
}

impl StormResult {
    fn title(&self) -> String {
        let side = match self.kind {
            SideKind::Direct => "direct",
            SideKind::Watchmux => "watchmux",
        };
        let fairness = if self.fairness.is_empty() { String::new() } else { format!(", {}", self.fairness) };
        format!("{side}, {}{fairness}", if self.noisy { "noisy" } else { "quiet" })
    }
}

pub fn report(b: &Bench, results: &[StormResult]) {
    println!();
    println!(
        "### {} kubelets (as nodes), {} noisy LISTs of every pod at once (`resourceVersion=0`) or none",
        thousands(b.m),
        b.noisy
    );
    println!();
    // A few column titles, leaked: the table wants them 'static.
    let mut t = SideTable::new(results, |r| Box::leak(r.title().into_boxed_str()));
    t.row("kubelets synced / failed; all synced in, s", |r| {
        format!("{} / {}; {:.1}", thousands(r.synced), r.failed, r.all_synced_secs)
    });
    t.row("**kubelet time to synced p50 / p99 / max, ms**", |r| format!("**{}**", p50_p99_max(&r.synced_in)));
    t.row("429s answered to kubelets (retried)", |r| r.kubelet_429.to_string());
    t.row("noisy LISTs read / refused (429) / failed; MiB read", |r| {
        format!(
            "{} / {} / {}; {}",
            r.noisy_ok,
            r.noisy_refused,
            r.noisy_errors,
            fmt0(r.noisy_bytes as f64 / (1024.0 * 1024.0))
        )
    });
    t.row("kube-apiserver APF rejections, by priority level", |r| {
        let v: Vec<_> = r.apf_rejected.iter().filter(|(_, n)| *n > 0.0).map(|(l, n)| format!("{l} {n}")).collect();
        if v.is_empty() { "0".into() } else { v.join(", ") }
    });
    t.row("kube-apiserver / watchmux / bench CPU over the phase, ms (phase, s)", |r| {
        let wm = match r.kind {
            SideKind::Direct => "–".into(),
            SideKind::Watchmux => fmt0(ticks_ms(r.cpu.server)),
        };
        format!("{} / {wm} / {} ({:.1})", fmt0(ticks_ms(r.cpu.apiserver)), fmt0(ticks_ms(r.cpu.bench)), r.phase_secs)
    });
    t.print();
    for r in results {
        if let Some(f) = &r.failure {
            println!("- {}: first failure: {f}", r.title());
        }
    }
}

pub fn json(b: &Bench, results: &[StormResult]) -> serde_json::Value {
    json!({
        "scenario": "kubelet-storm",
        "m": b.m,
        "noisy": b.noisy,
        "runs": results.iter().map(|r| json!({
            "side": r.kind.name(),
            "condition": if r.noisy { "noisy" } else { "quiet" },
            "fairness": r.fairness,
            "synced": r.synced,
            "failed": r.failed,
            "failure": r.failure,
            "all_synced_secs": r.all_synced_secs,
            "time_to_synced_ms": latency_json(&r.synced_in),
            "kubelet_429": r.kubelet_429,
            "noisy_ok": r.noisy_ok,
            "noisy_refused": r.noisy_refused,
            "noisy_errors": r.noisy_errors,
            "noisy_bytes": r.noisy_bytes,
            "phase_secs": r.phase_secs,
            "apiserver_cpu_ms": ticks_ms(r.cpu.apiserver),
            "server_cpu_ms": ticks_ms(r.cpu.server),
            "bench_cpu_ms": ticks_ms(r.cpu.bench),
            "apiserver_apf_rejected": r.apf_rejected.iter().map(|(l, n)| json!([l, n])).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
