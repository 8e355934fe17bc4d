//! The kubelet storm: K kubelet-shaped clients started at one instant, each
//! on an HTTP/2 connection of its own, each syncing what a kubelet syncs:
//! its pods (`spec.nodeName`), its Node, every Service, and the ConfigMap
//! and Secret its first pod mounts (by `metadata.name`). A client is synced
//! when all five have their initial state and a watch open:
//!
//! - `classic`: LIST `resourceVersion=0`, then WATCH from the list's version
//!   (a reflector before client-go 1.35);
//! - `watch-list`: one WATCH with `sendInitialEvents=true` and
//!   `resourceVersionMatch=NotOlderThan`, synced at the bookmark annotated
//!   `k8s.io/initial-events-end` (client-go 1.35+). As client-go v0.37's
//!   reflector: one that ends in the 504 "Too large resource version" (the
//!   answer of a server that cannot prove its watch cache fresh in time) is
//!   asked again at once; one that ends in another ERROR event falls back to
//!   the classic LIST and WATCH.
//!
//! Time to synced is measured from the storm's start, the instant every
//! client is released, so it includes waiting for a connection, as a real
//! kubelet fleet restarted at once would. A kubelet whose watch ends (its
//! server restarted) syncs everything again; the time from the restart to
//! that is its time to resynced.
//!
//! With node-locals (side (c), [`crate::nodelocal`]), the first kubelets
//! each ask their own node-local watchmux, started at the same instant: until
//! it listens, its kubelet's connection is refused and tried again, as a
//! kubelet whose API endpoint is not up yet does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use futures_util::future::{join_all, try_join_all};
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::common::client::{Sender, Shape, Target};
use crate::common::lines::{End, read_lines};
use crate::objects::World;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Classic,
    WatchList,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Classic => "classic",
            Mode::WatchList => "watch-list",
        }
    }
}

/// What every client of one storm shares.
#[derive(Default)]
pub struct Tally {
    pub synced_ms: parking_lot::Mutex<Vec<f64>>,
    pub failed: AtomicUsize,
    pub refused_429: AtomicU64,
    /// Times a synced kubelet's watches ended under it (it syncs again).
    pub streams_broken: AtomicU64,
    /// Bytes of initial state received (lists and initial events).
    pub initial_bytes: AtomicU64,
    /// The kubelets (by node index) that synced, for the events they must get.
    pub synced_nodes: parking_lot::Mutex<std::collections::HashSet<usize>>,
    /// Events (not bookmarks) received on the held watches once synced.
    pub live_events: AtomicU64,
    /// When the server was restarted under the synced kubelets, and how
    /// long after that each one was synced again (those whose watches broke).
    pub restarted_at: parking_lot::Mutex<Option<Instant>>,
    pub resynced_ms: parking_lot::Mutex<Vec<f64>>,
    /// Kubelets that could not sync again within their attempts.
    pub resync_failed: AtomicUsize,
    pub first_error: parking_lot::Mutex<Option<String>>,
    /// Watch-lists that ended in the 504 "Too large resource version"
    /// before their initial events did, and were asked again.
    pub watch_list_retries: AtomicU64,
    /// Watch-lists that ended in another ERROR event, after which the
    /// client listed and watched.
    pub watch_list_fallbacks: AtomicU64,
    /// Of `synced_ms`, the kubelets behind a node-local of their own.
    pub local_synced_ms: parking_lot::Mutex<Vec<f64>>,
    /// Connections to a node-local refused (it was not listening yet).
    pub local_refused: AtomicU64,
}

/// The five collections kubelet `i` syncs.
fn paths(w: &World, i: usize) -> [String; 5] {
    let node = World::node_name(i);
    // Its first pod is pod i (pod p runs on node p % nodes).
    let ns = w.namespace(i);
    let (cm, secret) = w.pod_config(i);
    [
        format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"),
        format!("/api/v1/nodes?fieldSelector=metadata.name%3D{node}"),
        "/api/v1/services".to_owned(),
        format!("/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3D{cm}"),
        format!("/api/v1/namespaces/{ns}/secrets?fieldSelector=metadata.name%3D{secret}"),
    ]
}

/// client-go's answer to 429: wait Retry-After (1 s if absent), try again;
/// its reflector never gives up, so a kubelet here tries for as long as a
/// storm may last (SCALE_STORM_TIMEOUT's default, 900 s) rather than fail
/// a kubelet client-go would have synced late.
const RETRIES_429: usize = 900;

async fn send(
    conn: &Sender,
    target: &Target,
    path: &str,
    tally: &Tally,
) -> anyhow::Result<http::Response<hyper::body::Incoming>> {
    for _ in 0..RETRIES_429 {
        let resp = conn.send(target.request(Shape::H2, path)).await?;
        if resp.status() != StatusCode::TOO_MANY_REQUESTS {
            return Ok(resp);
        }
        tally.refused_429.fetch_add(1, Ordering::Relaxed);
        let wait = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs);
        tokio::time::sleep(wait).await;
    }
    bail!("{path}: 429 {RETRIES_429} times")
}

/// Syncs one collection; gives back the open watch's body.
async fn sync_one(
    conn: &Sender,
    target: &Target,
    path: &str,
    mode: Mode,
    tally: &Tally,
    stop: &CancellationToken,
) -> anyhow::Result<hyper::body::Incoming> {
    let sep = if path.contains('?') { '&' } else { '?' };
    if mode == Mode::Classic {
        return list_then_watch(conn, target, path, tally).await;
    }
    let watch =
        format!("{path}{sep}watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan");
    for _ in 0..WATCH_LIST_ATTEMPTS {
        match watch_list(conn, target, path, &watch, tally, stop).await? {
            WatchList::Synced(body) => return Ok(body),
            WatchList::TooLarge => {
                tally.watch_list_retries.fetch_add(1, Ordering::Relaxed);
            }
            WatchList::Failed => {
                // client-go's reflector: "Falling back to regular list".
                tally.watch_list_fallbacks.fetch_add(1, Ordering::Relaxed);
                return list_then_watch(conn, target, path, tally).await;
            }
        }
    }
    bail!("WATCH {path}: 504 Too large resource version {WATCH_LIST_ATTEMPTS} times")
}

/// How many 504s "Too large resource version" a kubelet takes on one
/// collection before it gives up (client-go retries for ever; a bench ends).
const WATCH_LIST_ATTEMPTS: usize = 100;

/// How one watch-list ended.
enum WatchList {
    /// Its initial events ended: the watch goes on in this body.
    Synced(hyper::body::Incoming),
    /// An ERROR event with the `ResourceVersionTooLarge` cause: client-go
    /// asks again at once (its reflector's `watchList` loop).
    TooLarge,
    /// Another ERROR event: client-go lists instead.
    Failed,
}

async fn watch_list(
    conn: &Sender,
    target: &Target,
    path: &str,
    watch: &str,
    tally: &Tally,
    stop: &CancellationToken,
) -> anyhow::Result<WatchList> {
    let resp = send(conn, target, watch, tally).await?;
    if resp.status() != StatusCode::OK {
        bail!("WATCH {path}: {}", resp.status());
    }
    let mut body = resp.into_body();
    // Read up to the initial-events-end bookmark; the rest of the
    // stream is held (and drained) by the caller.
    let (mut done, mut error, mut too_large) = (false, false, false);
    let mut bytes = 0u64;
    // Ends the read at the bookmark (read_lines looks at its token
    // before each frame), or with the storm.
    let until = stop.child_token();
    let end = read_lines(&mut body, &until, |line, _| {
        bytes += line.len() as u64;
        if line.starts_with(b"{\"type\":\"BOOKMARK\"") && line.windows(25).any(|w| w == b"k8s.io/initial-events-end") {
            done = true;
            until.cancel();
        }
        if line.starts_with(b"{\"type\":\"ERROR\"") {
            error = true;
            too_large |= line.windows(23).any(|w| w == b"ResourceVersionTooLarge");
        }
    })
    .await;
    tally.initial_bytes.fetch_add(bytes, Ordering::Relaxed);
    if done {
        return Ok(WatchList::Synced(body));
    }
    if error {
        return Ok(if too_large { WatchList::TooLarge } else { WatchList::Failed });
    }
    bail!("WATCH {path}: stream ended before its initial events ended ({end:?})")
}

/// LIST at `resourceVersion=0`, then WATCH from the list's version.
async fn list_then_watch(
    conn: &Sender,
    target: &Target,
    path: &str,
    tally: &Tally,
) -> anyhow::Result<hyper::body::Incoming> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let resp = send(conn, target, &format!("{path}{sep}resourceVersion=0"), tally).await?;
    if resp.status() != StatusCode::OK {
        bail!("LIST {path}: {}", resp.status());
    }
    let body = resp.into_body().collect().await?.to_bytes();
    tally.initial_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    // Only the list's version, the items skipped as they are read: 5,000
    // kubelets each holding a parsed Service list ran this bench out of
    // memory (12.7 GiB) before watchmux or kube-apiserver were.
    #[derive(serde::Deserialize)]
    struct ListMeta {
        metadata: Meta,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    let list: ListMeta = serde_json::from_slice(&body)?;
    let rv = list.metadata.resource_version.ok_or_else(|| anyhow!("LIST without RV"))?;
    drop(body);
    let watch = format!("{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}");
    let resp = send(conn, target, &watch, tally).await?;
    if resp.status() != StatusCode::OK {
        bail!("WATCH {path}: {}", resp.status());
    }
    Ok(resp.into_body())
}

/// What the clients of one storm start from.
struct Fleet {
    w: World,
    target: Target,
    /// Kubelet i < `local.len()` asks `local[i]` (its node-local) instead.
    local: Vec<Target>,
    mode: Mode,
    /// Bounds the TCP+TLS handshakes in flight.
    connects: Semaphore,
    /// Bounds the kubelets connecting and syncing at once (`SCALE_STARTS`):
    /// the same clients started a few at a time, for the tier's steady
    /// state without a storm's peak.
    starts: Semaphore,
    /// The instant every client was released.
    t0: Instant,
    tally: Arc<Tally>,
    stop: CancellationToken,
}

/// How many times a kubelet syncs again after its watches broke (a
/// kube-apiserver restart), and how long it waits between failed attempts.
const RESYNC_ATTEMPTS: usize = 600;
const RESYNC_PAUSE: Duration = Duration::from_millis(500);

/// How often, and how far apart, a kubelet tries its node-local's port
/// before the node-local listens (at most a minute: its start is a few ms).
const LOCAL_CONNECT_ATTEMPTS: usize = 600;
const LOCAL_CONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The connection was refused: nothing listens on the port (yet).
fn refused(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// One kubelet: synced (or failed), then holding its watches until `stop`;
/// when one of them ends (its server restarted), it connects and syncs
/// everything again, as a reflector relists after its watch fails with a
/// version the new server no longer has.
async fn kubelet(i: usize, f: Arc<Fleet>) {
    let (tally, stop) = (&f.tally, &f.stop);
    let target = f.local.get(i).unwrap_or(&f.target);
    let mut attempts = 0;
    let mut first = true;
    loop {
        let synced = async {
            let _start = f.starts.acquire().await?;
            let conn = {
                let _p = f.connects.acquire().await?;
                target.connect(Shape::H2).await?
            };
            let bodies =
                try_join_all(paths(&f.w, i).iter().map(|p| sync_one(&conn, target, p, f.mode, tally, stop))).await?;
            anyhow::Ok((conn, bodies))
        };
        let (_conn, bodies) = match tokio::select! {
            _ = stop.cancelled() => return,
            r = synced => r,
        } {
            Ok(x) => x,
            Err(e) if first && i < f.local.len() && refused(&e) && attempts < LOCAL_CONNECT_ATTEMPTS => {
                tally.local_refused.fetch_add(1, Ordering::Relaxed);
                attempts += 1;
                tokio::time::sleep(LOCAL_CONNECT_PAUSE).await;
                continue;
            }
            Err(e) if first => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                tally.first_error.lock().get_or_insert_with(|| format!("kubelet {i}: {e:#}"));
                return;
            }
            Err(_) => {
                attempts += 1;
                if attempts >= RESYNC_ATTEMPTS {
                    tally.resync_failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                tokio::time::sleep(RESYNC_PAUSE).await;
                continue;
            }
        };
        if first {
            let ms = f.t0.elapsed().as_secs_f64() * 1e3;
            tally.synced_ms.lock().push(ms);
            if i < f.local.len() {
                tally.local_synced_ms.lock().push(ms);
            }
            tally.synced_nodes.lock().insert(i);
        } else if let Some(at) = *tally.restarted_at.lock() {
            tally.resynced_ms.lock().push(at.elapsed().as_secs_f64() * 1e3);
        }
        first = false;
        attempts = 0;
        // Held until the storm stops or the first of them ends.
        let held = bodies.into_iter().map(|body| {
            let (stop, tally) = (stop.clone(), tally.clone());
            Box::pin(async move {
                let counted = |line: &[u8], _| {
                    if !line.starts_with(b"{\"type\":\"BOOKMARK\"") {
                        tally.live_events.fetch_add(1, Ordering::Relaxed);
                    }
                };
                read_lines(body, &stop, counted).await
            })
        });
        let (end, _, _) = futures_util::future::select_all(held).await;
        if end == End::Cancelled {
            return;
        }
        tally.streams_broken.fetch_add(1, Ordering::Relaxed);
    }
}

/// A storm in progress: its clients run until [`Storm::stop`].
pub struct Storm {
    pub tally: Arc<Tally>,
    pub kubelets: usize,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Storm {
    /// Releases `kubelets` clients at once; `connects` bounds the TCP+TLS
    /// handshakes in flight (a listen backlog, not a pacing). Kubelet i asks
    /// `local[i]` where there is one, `target` otherwise.
    pub fn start(w: World, target: Target, local: Vec<Target>, mode: Mode, kubelets: usize, connects: usize) -> Self {
        let fleet = Arc::new(Fleet {
            w,
            target,
            local,
            mode,
            connects: Semaphore::new(connects),
            starts: Semaphore::new(
                std::env::var("SCALE_STARTS").ok().and_then(|v| v.parse().ok()).unwrap_or(Semaphore::MAX_PERMITS),
            ),
            t0: Instant::now(),
            tally: Arc::new(Tally::default()),
            stop: CancellationToken::new(),
        });
        let tasks = (0..kubelets).map(|i| tokio::spawn(kubelet(i, fleet.clone()))).collect();
        Self { tally: fleet.tally.clone(), kubelets, stop: fleet.stop.clone(), tasks }
    }

    /// Waits until every client is synced or failed, at most `limit`; true if all are done.
    pub async fn wait_synced(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            let done = self.tally.synced_ms.lock().len() + self.tally.failed.load(Ordering::Relaxed);
            if done >= self.kubelets {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        join_all(self.tasks).await;
    }
}
