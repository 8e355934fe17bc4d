//! Which cluster the caches cache, and when the upstream became another.
//!
//! A cluster rebuilt behind the same address, or restored from an older etcd
//! backup, answers with resourceVersions that mean nothing to what the
//! caches hold: versions are etcd revisions, and a new etcd counts again
//! from 1 (a restored one from the backup's revision). Served as if it were
//! the old one, the caches would answer `resourceVersion=0` and consistent
//! reads with the old cluster's objects, and later apply the new cluster's
//! events on top of the old state. Two signs tell a new cluster:
//!
//! - **Its version went back.** A consistent read's resourceVersion is at
//!   least every version the same etcd ever served, so an upstream whose
//!   consistent LIST answers below what a cache already holds is another
//!   etcd (the reflector's list, the freshness probe, and the probe before a
//!   cache restored from disk resumes). A watch from such a version gets the
//!   watch cache's 504 `ResourceVersionTooLarge`: the reflector lists to see.
//! - **Its identity changed.** The `kube-system` namespace's uid: created
//!   once with the cluster and never deleted (kube-apiserver refuses to),
//!   so a different uid is a different cluster even when its versions have
//!   already passed the old ones. It is read at every full list and when a
//!   watch resumes after a failure or an early end (a rebuild restarts the
//!   API server, which ends every watch); caches asking together share one
//!   reading that began after they asked.
//!
//! Either starts a new *epoch*, shared by every cache of this upstream
//! (versions are global across resources: one cache's finding holds for
//! all): each reflector that sees the epoch move relists at once, and
//! installs the list as a new start (`Writer::start_over`): every watcher
//! gets 410 Expired, as the API server's clients get for versions a
//! restored etcd no longer has, and the history starts over at the new
//! cluster's version.
//!
//! A persisted store keeps the identity it was filled from ([`seed`] is
//! where a store's recorded identity comes in, and [`recorded`] what to
//! store with it), so a store from another cluster is dropped at start-up
//! by the same test.
//!
//! [`seed`]: ClusterIdentity::seed
//! [`recorded`]: ClusterIdentity::recorded

use http::StatusCode;
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cache::upstream_wire::upstream_get;
use crate::upstream::Upstream;
use crate::upstream::bounded_read;

/// The object whose uid names the cluster.
const IDENTITY_PATH: &str = "/api/v1/namespaces/kube-system";

/// What an identity check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The recorded cluster (or the first one seen, now recorded).
    Same,
    /// Another cluster than the recorded one: a new epoch has begun.
    New { was: String, now: String },
    /// No answer, or one without a uid (no permission to read namespaces):
    /// only the versions can tell.
    Unknown,
}

#[derive(Debug, Default)]
struct Recorded {
    uid: Option<String>,
    /// When the last reading of the uid began, and what it found.
    checked: Option<(Instant, Identity)>,
    /// Whether an unreadable identity was logged (once).
    told_unknown: bool,
}

/// The cluster the caches of one upstream hold, shared by their reflectors.
#[derive(Debug)]
pub(crate) struct ClusterIdentity {
    recorded: Mutex<Recorded>,
    /// One reading at a time; the others wait and share it.
    reading: tokio::sync::Mutex<()>,
    epoch: watch::Sender<u64>,
}

impl Default for ClusterIdentity {
    fn default() -> Self {
        Self { recorded: Mutex::default(), reading: tokio::sync::Mutex::new(()), epoch: watch::Sender::new(0) }
    }
}

impl ClusterIdentity {
    /// The identity a persisted store was filled from, before any cache
    /// asks the upstream: a different one found later drops the store.
    pub(crate) fn seed(&self, uid: Option<String>) {
        let mut recorded = self.recorded.lock();
        if recorded.uid.is_none() {
            recorded.uid = uid;
        }
    }

    /// The identity recorded, for a persisted store to keep.
    pub(crate) fn recorded(&self) -> Option<String> {
        self.recorded.lock().uid.clone()
    }

    /// The current epoch: it moves each time a new cluster is found.
    pub(crate) fn epoch(&self) -> u64 {
        *self.epoch.borrow()
    }

    /// Resolves once the epoch is past `epoch`.
    pub(crate) async fn moved_past(&self, epoch: u64) {
        let mut rx = self.epoch.subscribe();
        // The sender lives as long as `self`.
        let _ = rx.wait_for(|e| *e > epoch).await;
    }

    /// A cache found the upstream's version below its own: a new cluster.
    /// `seen` is the epoch the finder holds, so that many caches finding the
    /// same new cluster start one epoch, not one each.
    pub(crate) fn version_went_back(&self, seen: u64, label: &str, ours: u64, theirs: u64) {
        let started = self.epoch.send_if_modified(|e| {
            if *e == seen {
                *e += 1;
                true
            } else {
                false
            }
        });
        if started {
            // The recorded identity was the old cluster's.
            let mut recorded = self.recorded.lock();
            recorded.uid = None;
            recorded.checked = None;
            drop(recorded);
            tracing::warn!(resource = %label, cache_rv = ours, upstream_rv = theirs, "the upstream's resourceVersion went back below the cache's: a new or restored cluster; every cache relists and its watchers get 410");
            metrics::counter!(crate::metrics::UPSTREAM_NEW_CLUSTER, "sign" => "version").increment(1);
        }
    }

    /// Reads the upstream's identity (or shares a reading that began after
    /// this call) and compares it with the recorded one; a different one
    /// starts a new epoch.
    pub(crate) async fn check(&self, upstream: &Upstream) -> Identity {
        let asked = Instant::now();
        let _reading = self.reading.lock().await;
        if let Some((began, found)) = &self.recorded.lock().checked
            && *began >= asked
        {
            return found.clone();
        }
        let began = Instant::now();
        let found = match read_uid(upstream).await {
            Ok(now) => self.compare(now),
            Err(why) => {
                let mut recorded = self.recorded.lock();
                if !recorded.told_unknown {
                    recorded.told_unknown = true;
                    tracing::info!(why = %why, "cannot read the cluster's identity (the kube-system namespace's uid); a new cluster is told by its resourceVersions alone");
                }
                Identity::Unknown
            }
        };
        self.recorded.lock().checked = Some((began, found.clone()));
        found
    }

    fn compare(&self, now: String) -> Identity {
        let mut recorded = self.recorded.lock();
        match recorded.uid.replace(now.clone()) {
            None => Identity::Same,
            Some(was) if was == now => Identity::Same,
            Some(was) => {
                drop(recorded);
                self.epoch.send_modify(|e| *e += 1);
                tracing::warn!(was = %was, now = %now, "the upstream is another cluster (the kube-system namespace's uid changed); every cache relists and its watchers get 410");
                metrics::counter!(crate::metrics::UPSTREAM_NEW_CLUSTER, "sign" => "identity").increment(1);
                Identity::New { was, now }
            }
        }
    }
}

#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    metadata: NamedMeta,
}

#[derive(Deserialize, Default)]
struct NamedMeta {
    #[serde(default)]
    uid: String,
}

async fn read_uid(upstream: &Upstream) -> Result<String, String> {
    let resp = upstream_get(upstream, IDENTITY_PATH.to_owned()).await.map_err(|e| crate::error::error_chain(&e))?;
    let status = resp.status();
    let body = bounded_read::read_prefix(resp.into_body(), bounded_read::REFUSAL_BYTES).await;
    if status != StatusCode::OK {
        return Err(format!("{IDENTITY_PATH} answered {status}"));
    }
    let named: Named = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    Some(named.metadata.uid).filter(|u| !u.is_empty()).ok_or_else(|| format!("{IDENTITY_PATH} has no uid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_new_identity_or_a_version_gone_back_starts_one_new_epoch() {
        let cluster = ClusterIdentity::default();
        assert_eq!(cluster.compare("a".into()), Identity::Same, "the first is recorded");
        assert_eq!(cluster.compare("a".into()), Identity::Same);
        assert_eq!(cluster.epoch(), 0);
        let waiter = cluster.moved_past(0);
        tokio::pin!(waiter);
        assert!(waiter.as_mut().now_or_never().is_none());
        assert_eq!(cluster.compare("b".into()), Identity::New { was: "a".into(), now: "b".into() });
        assert_eq!(cluster.epoch(), 1);
        assert!(waiter.as_mut().now_or_never().is_some());
        // Two caches finding the same regression from epoch 1: one epoch.
        cluster.version_went_back(1, "x", 100, 5);
        cluster.version_went_back(1, "y", 100, 5);
        assert_eq!(cluster.epoch(), 2);
        // The old identity is forgotten with its cluster: the next is recorded.
        assert_eq!(cluster.recorded(), None);
        assert_eq!(cluster.compare("c".into()), Identity::Same);
        // A store's seed is the recorded identity until a reading replaces it.
        let restored = ClusterIdentity::default();
        restored.seed(Some("old".into()));
        assert_eq!(restored.compare("new".into()), Identity::New { was: "old".into(), now: "new".into() });
    }
}
