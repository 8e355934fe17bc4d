//! The writer: R merge patches a second, for a bounded time, spread over a few
//! ConfigMaps of one size, each patch setting `data.seq` to its sequence
//! number; straight at kube-apiserver on the bench's own connection, at most
//! `IN_FLIGHT` at once (the rate achieved is reported: on two shared cores the
//! API server may not keep up with 1,000 writes a second).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::common::api::Api;

/// Patches in flight at once, at most.
const IN_FLIGHT: usize = 64;
/// Bound on one patch.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The objects of one size class: `count` ConfigMaps `fanout-<label>-<i>` in `ns`.
#[derive(Clone)]
pub struct Objects {
    pub ns: String,
    pub label: String,
    pub count: usize,
}

impl Objects {
    pub fn path(&self, i: usize) -> String {
        format!("/api/v1/namespaces/{}/configmaps/fanout-{}-{}", self.ns, self.label, i % self.count)
    }

    /// Creates them (or leaves them as they are), each about `size` bytes as JSON.
    pub async fn create(&self, api: &Api, size: usize) -> anyhow::Result<()> {
        // metadata (name, namespace, uid, times, managedFields) takes about 350 bytes.
        let pad = "x".repeat(size.saturating_sub(350).max(16));
        for i in 0..self.count {
            let cm = serde_json::json!({"apiVersion":"v1","kind":"ConfigMap",
                "metadata":{"name":format!("fanout-{}-{i}", self.label)},
                "data":{"pad":pad,"seq":"0"}});
            api.create(&format!("/api/v1/namespaces/{}/configmaps", self.ns), &cm).await?;
        }
        Ok(())
    }
}

/// What a write phase did: for write k (sequence number `seq_base + k + 1`),
/// when it was issued and when the API server acknowledged it (None: failed).
pub struct Writes {
    pub issued: Vec<Instant>,
    pub acked: Vec<Option<Instant>>,
    pub errors: usize,
    pub slowest_ms: f64,
    pub secs: f64,
}

impl Writes {
    pub fn ok(&self) -> usize {
        self.acked.iter().flatten().count()
    }

    pub fn achieved_rate(&self) -> f64 {
        if self.secs <= 0.0 { 0.0 } else { self.issued.len() as f64 / self.secs }
    }
}

/// `count` writes at `rate` a second, sequence numbers `seq_base + 1 ..= seq_base + count`.
pub async fn write_phase(api: &Arc<Api>, objects: &Objects, rate: u32, count: usize, seq_base: u64) -> Writes {
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut issued = Vec::with_capacity(count);
    let mut tasks = Vec::with_capacity(count);
    for k in 0..count {
        // On schedule, or as soon as a permit frees up when the API server lags.
        tokio::time::sleep_until((start + period * k as u32).into()).await;
        let permit = permits.clone().acquire_owned().await.expect("semaphore open");
        let at = Instant::now();
        issued.push(at);
        let (api, path) = (api.clone(), objects.path(k));
        let patch = format!(r#"{{"data":{{"seq":"{}"}}}}"#, seq_base + k as u64 + 1);
        tasks.push(tokio::spawn(async move {
            let r = tokio::time::timeout(WRITE_TIMEOUT, api.merge_patch(&path, patch)).await;
            drop(permit);
            match r {
                Ok(Ok(s)) if s.is_success() => Ok(Instant::now()),
                other => Err(format!("{other:?}")),
            }
        }));
    }
    let mut acked = Vec::with_capacity(count);
    let mut errors = 0;
    let mut slowest = 0f64;
    for (k, t) in tasks.into_iter().enumerate() {
        match t.await {
            Ok(Ok(at)) => {
                slowest = slowest.max(at.duration_since(issued[k]).as_secs_f64() * 1000.0);
                acked.push(Some(at));
            }
            Ok(Err(e)) => {
                if errors < 3 {
                    eprintln!("fanout: write {} failed: {e}", seq_base + k as u64 + 1);
                }
                errors += 1;
                acked.push(None);
            }
            Err(e) => {
                errors += 1;
                eprintln!("fanout: write task: {e}");
                acked.push(None);
            }
        }
    }
    let secs = issued.last().map_or(0.0, |l| l.duration_since(start).as_secs_f64() + period.as_secs_f64());
    Writes { issued, acked, errors, slowest_ms: slowest, secs }
}
