//! `RESTART_KIND=upgrade` (`integration/scripts/bench-upgrade.sh`): a
//! rolling control-plane upgrade under writes. What this module adds to the
//! restart bench: a writer that creates, updates and deletes ConfigMaps in
//! the bench namespace throughout (through the load balancer, so that it
//! keeps writing while one API server is down), a record of every event each
//! watcher received, and the check of those records against etcd's own watch
//! of the namespace's keys (`integration/cmd/etcdwatch`, the oracle): etcd
//! is where resourceVersions come from, so an event an API server's or
//! watchmux's cache dropped, repeated or reordered shows there.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::Method;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::api::Api;

/// A watch event's type, as the API gives it (etcd's PUT is ADDED when it
/// created the key, MODIFIED otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One event: its resourceVersion, its object's name (hashed: a million of
/// them are kept), its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub rv: u64,
    pub name: u64,
    pub kind: EventType,
}

pub fn name_hash(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// Every event one watcher received, in order, and what its LISTs skipped.
#[derive(Default)]
pub struct EventLog {
    /// The first LIST's resourceVersion: events after it are the watcher's to receive.
    pub start_rv: Option<u64>,
    pub events: Vec<Seen>,
    /// resourceVersion ranges (after, up to] a relist (after 410 Gone) jumped over:
    /// events there reached the watcher as a LIST's state, not as events.
    pub relist_gaps: Vec<(u64, u64)>,
    /// The highest resourceVersion read (events and bookmarks): where a watch resumes.
    last_rv: u64,
    /// The last event's resourceVersion, for the order check.
    last_event_rv: u64,
    pub out_of_order: u64,
    pub duplicated: u64,
    received: std::collections::HashSet<u64>,
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    object: Object,
}
#[derive(Deserialize)]
struct Object {
    metadata: Meta,
}
#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

impl EventLog {
    pub fn listed(&mut self, rv: u64) {
        match self.start_rv {
            None => self.start_rv = Some(rv),
            Some(_) => self.relist_gaps.push((self.last_rv, rv)),
        }
        self.last_rv = self.last_rv.max(rv);
        self.last_event_rv = rv;
    }

    pub fn event(&mut self, line: &[u8]) {
        let Ok(l) = serde_json::from_slice::<Line<'_>>(line) else { return };
        let Ok(rv) = l.object.metadata.resource_version.parse::<u64>() else { return };
        self.last_rv = self.last_rv.max(rv);
        let kind = match l.kind {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            _ => return, // BOOKMARK: a resume point, not an event
        };
        self.record(rv, &l.object.metadata.name, kind);
    }

    /// One event, however it was read (a watch line, an informer's handler call).
    pub fn record(&mut self, rv: u64, name: &str, kind: EventType) {
        self.last_rv = self.last_rv.max(rv);
        if !self.received.insert(rv) {
            self.duplicated += 1;
        } else if rv <= self.last_event_rv {
            self.out_of_order += 1;
        }
        self.last_event_rv = self.last_event_rv.max(rv);
        self.events.push(Seen { rv, name: name_hash(name), kind });
    }
}

/// etcd's sequence, from etcdwatch's JSON lines, sorted by revision.
pub struct Oracle {
    pub events: Vec<Seen>,
}

#[derive(Deserialize)]
struct OracleLine {
    key: String,
    #[serde(rename = "type")]
    kind: String,
    mod_revision: u64,
    create_revision: u64,
}

impl Oracle {
    /// Reads `path` once it holds revision `until` (etcdwatch writes as it goes), at most 30 s.
    pub async fn read_until(path: &str, until: u64) -> anyhow::Result<Self> {
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(path).with_context(|| format!("oracle {path}"))?;
            let mut events = Vec::new();
            for line in text.lines().filter(|l| !l.is_empty()) {
                let l: OracleLine = serde_json::from_str(line).with_context(|| format!("oracle line {line}"))?;
                let name = l.key.rsplit('/').next().unwrap_or_default();
                let kind = match (l.kind.as_str(), l.create_revision == l.mod_revision) {
                    ("DELETE", _) => EventType::Deleted,
                    (_, true) => EventType::Added,
                    _ => EventType::Modified,
                };
                events.push(Seen { rv: l.mod_revision, name: name_hash(name), kind });
            }
            events.sort_by_key(|e| e.rv);
            if events.last().is_some_and(|e| e.rv >= until) {
                return Ok(Self { events });
            }
            if Instant::now() > give_up {
                bail!("the oracle {path} never reached revision {until}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The check of every watcher's events against the oracle, summed over a side.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    pub watchers: usize,
    /// etcd events in the checked range (from the oldest watcher start to the end).
    pub oracle_events: usize,
    /// Events owed, summed over watchers (each from its own start).
    pub owed: u64,
    pub received: u64,
    /// Owed, not received as an event.
    pub lost: u64,
    /// Of those, in a range a relist (after 410) covered with a LIST's state.
    pub lost_in_relist: u64,
    pub watchers_with_loss: usize,
    pub out_of_order: u64,
    pub duplicated: u64,
    /// Received with an etcd revision, but another name or type than etcd's.
    pub wrong: u64,
    /// Received with a revision etcd never had for these keys.
    pub unknown: u64,
}

impl Verdict {
    /// Each log's events after its start, up to `end_rv` (the last write, which every watcher saw).
    pub fn check(oracle: &Oracle, logs: &[EventLog], end_rv: u64) -> Self {
        let by_rv: HashMap<u64, Seen> = oracle.events.iter().map(|e| (e.rv, *e)).collect();
        let mut v = Self { watchers: logs.len(), ..Self::default() };
        let oldest = logs.iter().filter_map(|l| l.start_rv).min().unwrap_or(end_rv);
        v.oracle_events = oracle.events.iter().filter(|e| e.rv > oldest && e.rv <= end_rv).count();
        for log in logs {
            let Some(start) = log.start_rv else { continue };
            let got: HashMap<u64, Seen> =
                log.events.iter().filter(|e| e.rv > start && e.rv <= end_rv).map(|e| (e.rv, *e)).collect();
            v.received += got.len() as u64;
            v.out_of_order += log.out_of_order;
            v.duplicated += log.duplicated;
            let mut lost_here = 0;
            for want in oracle.events.iter().filter(|e| e.rv > start && e.rv <= end_rv) {
                v.owed += 1;
                match got.get(&want.rv) {
                    Some(have) if have == want => {}
                    Some(_) => v.wrong += 1,
                    None => {
                        lost_here += 1;
                        if log.relist_gaps.iter().any(|&(after, upto)| want.rv > after && want.rv <= upto) {
                            v.lost_in_relist += 1;
                        }
                    }
                }
            }
            v.unknown += got.keys().filter(|rv| !by_rv.contains_key(rv)).count() as u64;
            v.lost += lost_here;
            v.watchers_with_loss += usize::from(lost_here > 0);
        }
        v
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "watchers": self.watchers, "oracle_events": self.oracle_events, "owed": self.owed,
            "received": self.received, "lost": self.lost, "lost_in_relist": self.lost_in_relist,
            "watchers_with_loss": self.watchers_with_loss, "out_of_order": self.out_of_order,
            "duplicated": self.duplicated, "wrong": self.wrong, "unknown": self.unknown,
        })
    }
}

/// Writes and failures of the churn writer.
#[derive(Default)]
pub struct WriteCounts {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
}

/// Creates, updates and deletes ConfigMaps `churn-<k>` in `ns`, one write
/// every `1/per_sec` s, until `stop`. A failed write (its API server going
/// away under it) is counted and the cycle goes on: the next one goes on a
/// new connection, which the load balancer gives to a live server.
pub async fn churn(api: Arc<Api>, ns: &str, per_sec: f64, stop: CancellationToken, counts: Arc<WriteCounts>) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let collection = format!("/api/v1/namespaces/{ns}/configmaps");
    for t in 0u64.. {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (k, op) = (t / 3, t % 3);
        let path = format!("{collection}/churn-{k}");
        let sent = match op {
            0 => {
                let body = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":format!("churn-{k}")},"data":{"v":"0"}});
                api.send(Method::POST, &collection, Some("application/json"), body.to_string().into()).await
            }
            1 => {
                let patch = Bytes::from(r#"{"data":{"v":"1"}}"#);
                api.send(Method::PATCH, &path, Some("application/merge-patch+json"), patch).await
            }
            _ => api.send(Method::DELETE, &path, None, Bytes::new()).await,
        };
        let counter = match sent {
            Ok((s, _)) if s.is_success() => &counts.ok,
            _ => &counts.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The checks above on made-up sequences, run at the bench's start (a
/// bench without the test harness has no `#[test]`s, as `lines::self_check`).
pub fn self_check() {
    a_missing_a_repeated_and_a_reordered_event_are_each_counted();
    events_a_relist_jumped_over_are_lost_in_a_relist_and_those_before_the_start_are_not_owed();
}

fn line(kind: &str, name: &str, rv: u64) -> Vec<u8> {
    format!(r#"{{"type":"{kind}","object":{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}}}"#).into_bytes()
}

fn oracle(events: &[(&str, EventType, u64)]) -> Oracle {
    Oracle { events: events.iter().map(|&(n, kind, rv)| Seen { rv, name: name_hash(n), kind }).collect() }
}

fn a_missing_a_repeated_and_a_reordered_event_are_each_counted() {
    use EventType::*;
    let etcd = oracle(&[("a", Added, 11), ("a", Modified, 12), ("b", Added, 13), ("a", Deleted, 14)]);
    let mut log = EventLog::default();
    log.listed(10);
    log.event(&line("ADDED", "a", 11));
    log.event(&line("BOOKMARK", "", 12));
    log.event(&line("ADDED", "b", 13));
    log.event(&line("ADDED", "b", 13));
    log.event(&line("DELETED", "a", 14));
    log.event(&line("MODIFIED", "a", 12));
    let v = Verdict::check(&etcd, &[log], 14);
    assert_eq!((v.owed, v.lost, v.duplicated, v.out_of_order, v.wrong), (4, 0, 1, 1, 0));

    let mut log = EventLog::default();
    log.listed(10);
    log.event(&line("ADDED", "a", 11));
    log.event(&line("MODIFIED", "b", 13));
    let v = Verdict::check(&etcd, &[log], 14);
    assert_eq!((v.lost, v.wrong, v.watchers_with_loss, v.lost_in_relist), (2, 1, 1, 0));
}

fn events_a_relist_jumped_over_are_lost_in_a_relist_and_those_before_the_start_are_not_owed() {
    use EventType::*;
    let etcd = oracle(&[("a", Added, 11), ("a", Modified, 12), ("a", Modified, 13), ("a", Deleted, 14)]);
    let mut log = EventLog::default();
    log.listed(11);
    log.event(&line("MODIFIED", "a", 12));
    log.listed(13); // 410, then a LIST at 13: 13 came as state
    log.event(&line("DELETED", "a", 14));
    let v = Verdict::check(&etcd, &[log], 14);
    assert_eq!((v.owed, v.received, v.lost, v.lost_in_relist), (3, 2, 1, 1));
    assert_eq!(v.oracle_events, 3);
}
