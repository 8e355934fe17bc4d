//! The writer: creates, updates and deletes objects straight at
//! kube-apiserver (never through watchmux or the relay) and keeps a log of
//! every write the API server acknowledged, with the version it got: the
//! truth the watchers are held to.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use bytes::Bytes;
use http::{Method, StatusCode};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::api::Api;

/// The marker object: updated after a fault, every watcher is current once it has its version.
pub const MARKER: &str = "marker";
/// A write that takes longer than this counts as failed (its outcome unknown).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The kind of object written: ConfigMaps, or a custom resource.
#[derive(Clone)]
pub struct Kind {
    /// The namespaced collection, e.g. `/api/v1/namespaces/ns/configmaps`.
    pub collection: String,
    pub api_version: String,
    pub kind: String,
    /// Where the payload goes: `data` for a ConfigMap, `spec` for a custom resource.
    pub field: &'static str,
}

impl Kind {
    pub fn configmaps(ns: &str) -> Self {
        Self {
            collection: format!("/api/v1/namespaces/{ns}/configmaps"),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            field: "data",
        }
    }

    fn object(&self, name: &str, seq: u64, pad: &str) -> Value {
        let mut o = json!({"apiVersion": self.api_version, "kind": self.kind, "metadata": {"name": name}});
        o[self.field] = json!({"pad": pad, "seq": seq.to_string()});
        o
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Update,
    Delete,
}

/// One acknowledged write.
#[derive(Clone, Debug)]
pub struct Write {
    pub name: String,
    pub op: Op,
    /// The version the write made (none for a deletion: the API server does not say).
    pub rv: Option<u64>,
    pub acked: Instant,
}

/// What the writer believes of an object.
#[derive(Clone, Debug)]
enum Known {
    Present,
    Absent,
    /// A write failed without an answer: ask before the next one.
    Unknown,
}

pub struct Writer {
    api: Arc<Api>,
    pub kind: Kind,
    pad: String,
    seq: AtomicU64,
    log: Mutex<Vec<Write>>,
    known: Mutex<BTreeMap<String, Known>>,
    pub failed: AtomicU64,
}

/// `metadata.resourceVersion` of an object's JSON.
fn rv_of(body: &[u8]) -> anyhow::Result<u64> {
    let v: Value = serde_json::from_slice(body)?;
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).ok_or_else(|| anyhow!("no resourceVersion"))
}

impl Writer {
    /// `object_bytes`: the size of each object's padding.
    pub fn new(api: Arc<Api>, kind: Kind, object_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            api,
            kind,
            pad: "x".repeat(object_bytes),
            seq: AtomicU64::new(1),
            log: Mutex::new(Vec::new()),
            known: Mutex::new(BTreeMap::new()),
            failed: AtomicU64::new(0),
        })
    }

    async fn send(&self, method: Method, path: &str, ctype: Option<&str>, body: Bytes) -> Option<(StatusCode, Bytes)> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.api.send(method, path, ctype, body)).await {
            Ok(Ok(r)) => Some(r),
            _ => None,
        }
    }

    fn record(&self, name: &str, op: Op, rv: Option<u64>) {
        let known = if op == Op::Delete { Known::Absent } else { Known::Present };
        self.known.lock().insert(name.to_owned(), known);
        self.log.lock().push(Write { name: name.to_owned(), op, rv, acked: Instant::now() });
    }

    fn failed(&self, name: &str, what: String) -> anyhow::Error {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.known.lock().insert(name.to_owned(), Known::Unknown);
        anyhow!("{name}: {what}")
    }

    pub async fn create(&self, name: &str) -> anyhow::Result<u64> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let body = self.kind.object(name, seq, &self.pad).to_string();
        match self.send(Method::POST, &self.kind.collection, Some("application/json"), body.into()).await {
            Some((s, b)) if s.is_success() => {
                let rv = rv_of(&b)?;
                self.record(name, Op::Create, Some(rv));
                Ok(rv)
            }
            Some((StatusCode::CONFLICT, _)) => Err(self.failed(name, "create: already there".into())),
            other => Err(self.failed(name, format!("create: {:?}", other.map(|o| o.0)))),
        }
    }

    pub async fn update(&self, name: &str) -> anyhow::Result<u64> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let patch = json!({ self.kind.field: {"seq": seq.to_string()} }).to_string();
        let path = format!("{}/{name}", self.kind.collection);
        match self.send(Method::PATCH, &path, Some("application/merge-patch+json"), patch.into()).await {
            Some((s, b)) if s.is_success() => {
                let rv = rv_of(&b)?;
                self.record(name, Op::Update, Some(rv));
                Ok(rv)
            }
            other => Err(self.failed(name, format!("update: {:?}", other.map(|o| o.0)))),
        }
    }

    pub async fn delete(&self, name: &str) -> anyhow::Result<()> {
        let path = format!("{}/{name}", self.kind.collection);
        match self.send(Method::DELETE, &path, None, Bytes::new()).await {
            Some((s, _)) if s.is_success() => {
                self.record(name, Op::Delete, None);
                Ok(())
            }
            other => Err(self.failed(name, format!("delete: {:?}", other.map(|o| o.0)))),
        }
    }

    /// Asks the API server whether `name` exists.
    async fn resync(&self, name: &str) -> Option<Known> {
        let path = format!("{}/{name}", self.kind.collection);
        let known = match self.send(Method::GET, &path, None, Bytes::new()).await? {
            (StatusCode::NOT_FOUND, _) => Known::Absent,
            (s, _) if s.is_success() => Known::Present,
            _ => return None,
        };
        self.known.lock().insert(name.to_owned(), known.clone());
        Some(known)
    }

    /// Updates the marker until the API server takes it (at most 60 s): its version and acknowledgement.
    pub async fn marker(&self) -> anyhow::Result<(u64, Instant)> {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            match self.update(MARKER).await {
                Ok(rv) => return Ok((rv, Instant::now())),
                Err(e) if Instant::now() > until => bail!("marker write: {e:#}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// One random change among `names`: create what is absent; update (4 in 5)
    /// or delete what is present.
    pub async fn random_change(&self, names: &[String]) {
        let name = &names[rand::rng().random_range(0..names.len())];
        let known = self.known.lock().get(name).cloned().unwrap_or(Known::Unknown);
        let known = match known {
            Known::Unknown => match self.resync(name).await {
                Some(k) => k,
                None => return,
            },
            k => k,
        };
        let _ = match known {
            Known::Absent => self.create(name).await.map(drop),
            Known::Present if rand::rng().random_bool(0.8) => self.update(name).await.map(drop),
            Known::Present => self.delete(name).await,
            Known::Unknown => Ok(()),
        };
    }

    /// Random changes among `names` at `rate` per second until `stop`.
    pub fn churn(
        self: &Arc<Self>,
        names: Vec<String>,
        rate: f64,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let w = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = w.random_change(&names) => {}
                }
            }
        })
    }

    /// Forgets what it knew of every object (their collection went away).
    pub fn forget(&self) {
        self.known.lock().clear();
    }

    /// Takes `other`'s writes (to the same collection) into its log, in the order acknowledged.
    pub fn absorb(&self, other: &Writer) {
        let mut log = self.log.lock();
        log.extend(other.log());
        log.sort_by_key(|w| w.acked);
    }

    pub fn log(&self) -> Vec<Write> {
        self.log.lock().clone()
    }

    pub fn writes(&self) -> usize {
        self.log.lock().len()
    }
}
