//! `RESTART_KIND=rollout`'s client-go half (`integration/scripts/bench-rollout.sh`):
//! the informer fleet `integration/cmd/informers` (K SharedInformerFactories,
//! each its own connection, a ConfigMap informer each), started by the bench
//! next to its reflector-shaped watchers and stopped at the end. While it
//! runs, its stderr says when every informer has synced and, as it rises,
//! the lowest resourceVersion every informer has been handed: the bench
//! waits on that for a write to have reached every informer. At the end it
//! writes every handler call, which becomes one [`EventLog`] per informer
//! for the same check against etcd as the reflectors' ([`Verdict`]), and
//! its request counts after sync (LISTs, watch-lists, watches, 410s).
//!
//! [`Verdict`]: crate::upgrade::Verdict

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncBufReadExt as _;

use crate::upgrade::{EventLog, EventType};

/// How long the fleet has to sync, and to write its summary once told to stop.
const SYNC_LIMIT: Duration = Duration::from_secs(120);
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// Where the informers connect.
pub enum FleetTarget {
    /// watchmux (through the bench's balancer): plain HTTP, no credentials.
    Proxy(std::net::SocketAddr),
    /// kube-apiserver, with the kubeconfig's server and credentials.
    Kubeconfig(String),
}

/// The running fleet.
pub struct Fleet {
    child: tokio::process::Child,
    out: PathBuf,
    /// The lowest, over the informers, of the highest resourceVersion each was handed.
    lowest_rv: Arc<AtomicU64>,
    pub informers: usize,
}

impl Fleet {
    /// Starts `bin` with `k` informers on `ns`; returns once every one has synced.
    pub async fn start(bin: &str, k: usize, ns: &str, target: FleetTarget, out: PathBuf) -> anyhow::Result<Self> {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.args(["--namespace", ns, "--informers", &k.to_string()]).arg("--out").arg(&out);
        match target {
            FleetTarget::Proxy(addr) => cmd.args(["--server", &format!("http://{addr}")]),
            FleetTarget::Kubeconfig(path) => cmd.args(["--kubeconfig", &path]),
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::inherit()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("starting {bin}"))?;
        let stderr = child.stderr.take().context("the fleet's stderr")?;
        let lowest_rv = Arc::new(AtomicU64::new(0));
        let synced = Arc::new(AtomicUsize::new(0));
        let (rv, done) = (lowest_rv.clone(), synced.clone());
        // Progress lines are read as they come; anything else is passed on (client-go's own logs).
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(n) = line.strip_prefix("rv ").and_then(|n| n.parse().ok()) {
                    rv.fetch_max(n, Ordering::SeqCst);
                } else if let Some(n) = line.strip_prefix("synced ").and_then(|n| n.parse().ok()) {
                    done.store(n, Ordering::SeqCst);
                } else {
                    eprintln!("informers: {line}");
                }
            }
        });
        let until = Instant::now() + SYNC_LIMIT;
        while synced.load(Ordering::SeqCst) < k {
            if let Some(status) = child.try_wait()? {
                bail!("the informer fleet exited before syncing: {status}");
            }
            if Instant::now() > until {
                bail!("the informer fleet did not sync within {SYNC_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self { child, out, lowest_rv, informers: k })
    }

    /// Waits until every informer was handed resourceVersion `rv` or later, at most `limit`.
    pub async fn wait_rv(&self, rv: u64, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.lowest_rv.load(Ordering::SeqCst) < rv {
            if Instant::now() > until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// SIGTERM, then the summary the fleet writes on its way out.
    pub async fn finish(mut self) -> anyhow::Result<FleetSummary> {
        let pid = self.child.id().context("the informer fleet already exited")?;
        let status = tokio::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().await?;
        if !status.success() {
            bail!("kill -TERM {pid}: {status}");
        }
        let exit = tokio::time::timeout(STOP_LIMIT, self.child.wait()).await.context("the fleet did not stop")??;
        if !exit.success() {
            bail!("the informer fleet exited {exit}");
        }
        let text = std::fs::read(&self.out).with_context(|| format!("{}", self.out.display()))?;
        Ok(serde_json::from_slice(&text)?)
    }
}

/// The fleet's output (integration/cmd/informers).
#[derive(Deserialize)]
pub struct FleetSummary {
    pub informers: Vec<InformerSummary>,
}

#[derive(Deserialize)]
pub struct InformerSummary {
    synced_rv: String,
    lists_after_sync: u64,
    watches_after_sync: u64,
    watch_lists_after_sync: u64,
    gone_410_after_sync: u64,
    #[serde(default)]
    events: Vec<HandlerCall>,
}

/// One handler call.
#[derive(Deserialize)]
struct HandlerCall {
    #[serde(rename = "type")]
    kind: String,
    name: String,
    rv: String,
    #[serde(default)]
    initial: bool,
    #[serde(default)]
    tombstone: bool,
    t_ms: u64,
}

impl FleetSummary {
    /// Each informer's handler calls as watch events, from its synced
    /// resourceVersion: update is MODIFIED, delete DELETED, an add after the
    /// first list ADDED; the first list's adds are its state, not events.
    pub fn logs(&self) -> Vec<EventLog> {
        self.informers
            .iter()
            .map(|inf| {
                let mut log = EventLog::default();
                if let Ok(rv) = inf.synced_rv.parse() {
                    log.listed(rv);
                }
                for call in inf.events.iter().filter(|c| !c.initial) {
                    let kind = match call.kind.as_str() {
                        "add" => EventType::Added,
                        "update" => EventType::Modified,
                        _ => EventType::Deleted,
                    };
                    if let Ok(rv) = call.rv.parse() {
                        log.record(rv, &call.name, kind);
                    }
                }
                log
            })
            .collect()
    }

    /// Per informer that had it, how long after `since` it was first handed
    /// resourceVersion `rv` or later, sorted.
    pub fn reached(&self, rv: u64, since: SystemTime) -> Vec<Duration> {
        let since_ms = since.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        let mut out: Vec<Duration> = self
            .informers
            .iter()
            .filter_map(|inf| inf.events.iter().find(|c| c.rv.parse::<u64>().is_ok_and(|r| r >= rv)).map(|c| c.t_ms))
            .map(|t| Duration::from_millis(t.saturating_sub(since_ms)))
            .collect();
        out.sort();
        out
    }

    /// Summed over the informers: LISTs, watch-lists, watch requests, 410s (all after sync), tombstone deletes.
    pub fn totals(&self) -> [u64; 5] {
        self.informers.iter().fold([0; 5], |t, i| {
            let tombstones = i.events.iter().filter(|c| c.tombstone).count() as u64;
            [
                t[0] + i.lists_after_sync,
                t[1] + i.watch_lists_after_sync,
                t[2] + i.watches_after_sync,
                t[3] + i.gone_410_after_sync,
                t[4] + tombstones,
            ]
        })
    }

    pub fn json(&self) -> serde_json::Value {
        let [lists, watch_lists, watches, gone, tombstones] = self.totals();
        json!({
            "informers": self.informers.len(),
            "lists_after_sync": lists,
            "watch_lists_after_sync": watch_lists,
            "watch_requests_after_sync": watches,
            "gone_410_after_sync": gone,
            "tombstone_deletes": tombstones,
            "relists_per_informer": self.informers.iter().map(|i| i.lists_after_sync + i.watch_lists_after_sync).collect::<Vec<_>>(),
        })
    }
}

/// The mapping above on a made-up summary, run at the bench's start (a
/// bench without the test harness has no `#[test]`s, as `upgrade::self_check`).
pub fn self_check() {
    use crate::upgrade::{Oracle, Seen, Verdict, name_hash};
    let summary: FleetSummary = serde_json::from_value(json!({"informers": [{
        "synced_rv": "10", "lists_after_sync": 0, "watches_after_sync": 1,
        "watch_lists_after_sync": 1, "gone_410_after_sync": 0,
        "events": [
            {"type": "add", "name": "a", "rv": "9", "initial": true, "t_ms": 1_000},
            {"type": "update", "name": "a", "rv": "11", "t_ms": 1_100},
            {"type": "update", "name": "a", "rv": "11", "t_ms": 1_200},
            {"type": "delete", "name": "b", "rv": "8", "tombstone": true, "t_ms": 1_300},
            {"type": "add", "name": "c", "rv": "13", "t_ms": 1_400},
        ],
    }]}))
    .expect("a summary as integration/cmd/informers writes it");
    let etcd = Oracle {
        events: [("a", EventType::Modified, 11), ("b", EventType::Deleted, 12), ("c", EventType::Added, 13)]
            .map(|(n, kind, rv)| Seen { rv, name: name_hash(n), kind })
            .to_vec(),
    };
    let v = Verdict::check(&etcd, &summary.logs(), 13);
    // The initial add is state, not an event; the repeated update is a
    // duplicate; the tombstone, at b's last known version, comes after 11
    // (out of order) and b's deletion at 12 never came as itself (lost).
    assert_eq!((v.owed, v.received, v.lost, v.duplicated, v.out_of_order, v.wrong), (3, 2, 1, 1, 1, 0));
    assert_eq!(summary.totals(), [0, 1, 1, 0, 1]);
    let since = UNIX_EPOCH + Duration::from_millis(1_050);
    assert_eq!(summary.reached(13, since), vec![Duration::from_millis(350)]);
    assert_eq!(summary.reached(11, since), vec![Duration::from_millis(50)]);
}
