//! Off the hot path: what the cache's writer applied, carried to a thread
//! that commits it to the resource's [`DiskStore`] in batches.
//!
//! The writer only appends each change to a bounded queue under a short
//! lock, never a wait for the disk, and wakes the thread only when the queue
//! was empty: under a stream of events that is once per commit, not once
//! per event, so fan-out latency does not depend on the disk (figures in
//! docs/node-local.md). The thread takes whatever has queued since its last
//! commit as one batch (one transaction, one fsync), so the commit rate
//! adapts to the disk: a slow disk makes fewer, larger batches.
//!
//! When the queue is full (the disk cannot keep up, or is failing), the
//! change is dropped and the feed marked as behind: the next commit is the
//! cache's whole current state (an O(1) snapshot of the store) instead of
//! the queued changes, which are all older than it. The cache never waits
//! for the disk; the disk catches up by rewriting.
//!
//! A commit that fails (a full disk) is logged and counted, the resource is
//! marked degraded (memory-only), and after a pause the thread reopens the
//! store and tries again with a whole batch, until one commits (logged and
//! counted as a reopen). The reopen is what makes it heal: redb refuses
//! every transaction on a handle that once saw an I/O error, so retrying on
//! the same handle would fail forever, even with room again. A store that
//! no longer opens (damaged by the failure) is moved aside and made anew.
//! Meanwhile the store holds its last good commit: a consistent, older
//! state, which a restart loads as unproven and the upstream watch (or its
//! 410 and a relist) brings up to date.
//!
//! An encrypted store's commits each carry the next generation, and the
//! directory's ledger records it after the commit (`ledger.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::disk::{Batch, DiskStore, Header};
use super::ledger::Ledger;
use super::seal::Sealer;
use crate::cache::resource::{ChangeSink, ResourceCache};
use crate::cache::state::event::CacheEvent;
use crate::cache::state::object::ObjectKey;
use crate::encode::watch::EventType;
use crate::error::error_chain;
use crate::metrics as m;

/// Changes that may wait for the disk before the feed counts as behind: a
/// few seconds of a busy resource; memory is a few words per change (the
/// objects are shared with the cache).
const QUEUE: usize = 8192;

/// How long the thread waits after a failed commit before it tries again.
#[cfg(not(test))]
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(10);
#[cfg(test)]
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(50);

/// What the writer tells the persisting thread.
#[derive(Debug)]
enum Note {
    /// One applied event: the key's new bytes (`None`: deleted) at `rv`.
    Changed { rv: u64, key: ObjectKey, json: Option<Bytes> },
    /// Nothing changed up to `rv` (a bookmark).
    Version(u64),
    /// The store was replaced (a list): write it all.
    Whole,
    /// The cluster the objects come from (`Header::cluster_identity`).
    Identity(Option<String>),
}

/// What waits for the thread, behind one lock.
#[derive(Debug, Default)]
struct Pending {
    notes: Vec<Note>,
    /// A note was dropped on a full queue: write the whole state.
    behind: bool,
    /// The writer is gone: commit what is left, then end.
    closed: bool,
}

#[derive(Debug)]
struct Queue {
    pending: Mutex<Pending>,
    /// Signalled when `pending` stops being empty, or closes.
    ready: Condvar,
    capacity: usize,
    /// Changes dropped on a full queue (tests look).
    dropped: AtomicU64,
}

/// The writer's end; dropping it ends the thread after its last commit.
#[derive(Debug)]
pub(crate) struct Feed {
    queue: Arc<Queue>,
    /// Joined only by tests; otherwise the thread ends on its own.
    #[cfg(test)]
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a feed starts from: the store and what it says besides objects.
pub(crate) struct Target {
    pub store: DiskStore,
    /// Written with whole batches and a store's first commit.
    pub header: Header,
    pub sealer: Option<Arc<Sealer>>,
    /// The directory's ledger, with encryption.
    pub ledger: Option<Arc<Ledger>>,
    /// The version the store is at (0: nothing committed yet).
    pub written_rv: u64,
    /// The store's generation: the next commit writes one more.
    pub generation: u64,
}

impl Feed {
    /// Starts the thread that persists `cache` into `target`'s store.
    pub(crate) fn start(cache: Arc<ResourceCache>, target: Target) -> Self {
        Self::with_queue(Persister::new(cache, target, RETRY_AFTER_FAILURE), QUEUE)
    }

    fn with_queue(persister: Persister, capacity: usize) -> Self {
        let queue = Arc::new(Queue {
            pending: Mutex::new(Pending::default()),
            ready: Condvar::new(),
            capacity,
            dropped: AtomicU64::new(0),
        });
        let name = format!("persist-{}", persister.cache.label());
        let q = queue.clone();
        let thread = std::thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || persister.run(&q))
            .expect("spawning a persist thread");
        #[cfg(not(test))]
        drop(thread);
        Self {
            queue,
            #[cfg(test)]
            thread: Some(thread),
        }
    }

    /// Records which cluster the objects come from in the store's header
    /// (covered by an encrypted store's MAC), from the next commit on; a
    /// restart reads it back as `Restored::cluster_identity`. For the sync
    /// side, once it knows the cluster's identity.
    pub(crate) fn set_cluster_identity(&self, identity: Option<String>) {
        self.offer_always(Note::Identity(identity));
    }

    /// Queued even on a full queue: it is not a change the whole state
    /// would restate.
    fn offer_always(&self, note: Note) {
        self.push(self.queue.pending.lock(), note);
    }

    fn offer(&self, note: Note) {
        let mut pending = self.queue.pending.lock();
        if pending.notes.len() >= self.queue.capacity {
            // Not waited for: the next commit rewrites everything instead.
            pending.behind = true;
            drop(pending);
            self.queue.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.push(pending, note);
    }

    /// Queues `note`, waking the thread when the queue was empty.
    fn push(&self, mut pending: parking_lot::MutexGuard<'_, Pending>, note: Note) {
        let was_empty = pending.notes.is_empty();
        pending.notes.push(note);
        drop(pending);
        if was_empty {
            self.queue.ready.notify_one();
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.queue.pending.lock().closed = true;
        self.queue.ready.notify_one();
        #[cfg(test)]
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the persist thread");
        }
    }
}

impl ChangeSink for Feed {
    fn changed(&self, event: &CacheEvent) {
        let json = (event.kind != EventType::Deleted).then(|| event.object.json().clone());
        self.offer(Note::Changed { rv: event.rv, key: event.object.key.clone(), json });
    }

    fn version(&self, rv: u64) {
        self.offer(Note::Version(rv));
    }

    fn whole(&self) {
        self.offer(Note::Whole);
    }

    fn cluster_identity(&self, identity: Option<String>) {
        self.set_cluster_identity(identity);
    }

    /// Dropping a test build's feed joins its thread.
    #[cfg(test)]
    fn finish(self: Box<Self>) {}
}

struct Persister {
    cache: Arc<ResourceCache>,
    store: DiskStore,
    header: Header,
    /// The header changed since it was last written.
    header_changed: bool,
    /// Encryption at rest (`seal.rs`), done here, off the writer's path.
    sealer: Option<Arc<Sealer>>,
    ledger: Option<Arc<Ledger>>,
    /// The store's file name, as the ledger knows it.
    name: String,
    /// The version of the last commit: notes at or below it are in the store.
    written_rv: u64,
    /// The generation of the last commit.
    generation: u64,
    degraded: bool,
    /// A commit failed: the handle must be reopened before the next.
    reopen: bool,
    /// [`RETRY_AFTER_FAILURE`], shorter in tests.
    retry_after: Duration,
    /// When the file was last looked at for compaction ([`COMPACT_CHECK_EVERY`]).
    compaction_checked: Instant,
}

/// How often, at most, a store's file is looked at for free pages to give
/// back (`DiskStore::compact_if_loose`): a check is one empty write
/// transaction; a compaction rewrites the file's live pages.
const COMPACT_CHECK_EVERY: Duration = Duration::from_secs(60);

impl Persister {
    fn new(cache: Arc<ResourceCache>, target: Target, retry_after: Duration) -> Self {
        let name = target.store.path().file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let closed = !target.store.is_open();
        Self {
            cache,
            store: target.store,
            header: target.header,
            header_changed: false,
            sealer: target.sealer,
            ledger: target.ledger,
            name,
            written_rv: target.written_rv,
            generation: target.generation,
            // A store its cache could not open yet: opened on the first try.
            degraded: closed,
            reopen: closed,
            retry_after,
            compaction_checked: Instant::now(),
        }
    }

    fn run(mut self, queue: &Queue) {
        let label = self.cache.label().to_owned();
        let commits_batch = metrics::counter!(m::PERSIST_COMMITS, "resource" => label.clone(), "kind" => "batch");
        let commits_whole = metrics::counter!(m::PERSIST_COMMITS, "resource" => label.clone(), "kind" => "whole");
        let errors = metrics::counter!(m::PERSIST_WRITE_ERRORS, "resource" => label.clone());
        let reopens = metrics::counter!(m::PERSIST_REOPENS, "resource" => label.clone());
        let degraded = metrics::gauge!(m::PERSIST_DEGRADED, "resource" => label.clone());
        let duration = metrics::histogram!(m::PERSIST_COMMIT_DURATION, "resource" => label.clone());
        degraded.set(if self.degraded { 1.0 } else { 0.0 });
        let mut ledger_failing = false;
        loop {
            let (mut notes, behind, closed) = {
                let mut pending = queue.pending.lock();
                // Degraded, the thread does not wait for a change to try
                // again: the store must catch up even if nothing changes.
                while pending.notes.is_empty() && !pending.behind && !pending.closed && !self.degraded {
                    queue.ready.wait(&mut pending);
                }
                if pending.notes.is_empty() && !pending.behind && !self.degraded {
                    return; // closed, and everything committed
                }
                (std::mem::take(&mut pending.notes), std::mem::take(&mut pending.behind), pending.closed)
            };
            for note in &mut notes {
                if let Note::Identity(identity) = note {
                    self.header.cluster_identity = identity.take();
                    self.header_changed = true;
                }
            }
            if self.reopen {
                match self.reopen_store() {
                    Ok(()) => {
                        reopens.increment(1);
                        self.reopen = false;
                        tracing::info!(resource = %label, "reopened the persist store after a write error");
                    }
                    Err(err) => {
                        errors.increment(1);
                        tracing::debug!(resource = %label, error = %error_chain(&err), "the persist store does not reopen yet");
                        if closed {
                            return; // the store keeps its last good commit
                        }
                        std::thread::sleep(self.retry_after);
                        continue;
                    }
                }
            }
            // A failed commit left the store behind the notes: rewrite it.
            let whole = behind || self.degraded || notes.iter().any(|n| matches!(n, Note::Whole));
            let batch = if whole { self.whole_batch() } else { self.coalesce(&mut notes) };
            let Some(batch) = batch else {
                if self.degraded {
                    // Open, and nothing to catch up to: the cache has not
                    // listed yet (its list is written whole when it does).
                    self.degraded = false;
                    degraded.set(0.0);
                }
                continue;
            };
            let started = Instant::now();
            match self.store.commit(&batch) {
                Ok(()) => {
                    duration.record(started.elapsed().as_secs_f64());
                    if batch.whole { &commits_whole } else { &commits_batch }.increment(1);
                    self.written_rv = batch.rv;
                    self.generation = batch.generation;
                    if batch.header.is_some() {
                        self.header_changed = false;
                    }
                    if let Some(ledger) = &self.ledger {
                        match ledger.record(&self.name, batch.generation) {
                            Ok(()) => ledger_failing = false,
                            Err(err) if !ledger_failing => {
                                ledger_failing = true;
                                tracing::warn!(resource = %label, error = %err, "cannot record the store's generation in the persist ledger; a restart may refuse the store as not the latest and start cold");
                            }
                            Err(_) => {}
                        }
                    }
                    if self.degraded {
                        tracing::info!(resource = %label, rv = batch.rv, "persisting again");
                        self.degraded = false;
                        degraded.set(0.0);
                    }
                    if self.compaction_checked.elapsed() >= COMPACT_CHECK_EVERY {
                        self.compaction_checked = Instant::now();
                        self.compact(&label);
                    }
                }
                Err(err) => {
                    errors.increment(1);
                    if !self.degraded {
                        tracing::error!(resource = %label, error = %error_chain(&err), retry_in = ?self.retry_after, "cannot persist; serving from memory only (the store keeps its last good state)");
                    }
                    self.degraded = true;
                    self.reopen = true;
                    degraded.set(1.0);
                    if closed {
                        return;
                    }
                    // Meanwhile the queue fills and the feed marks itself
                    // behind: the cache never waits for this.
                    std::thread::sleep(self.retry_after);
                }
            }
        }
    }

    /// Reopens the store's file; one that no longer opens for what it
    /// holds (not for the file system) is moved aside and made anew, to be
    /// written whole.
    fn reopen_store(&mut self) -> Result<(), super::disk::DiskError> {
        match self.store.reopen() {
            Err(err) if !err.is_io() => {
                let path = self.store.path().to_owned();
                let to = super::disk::move_aside(&path)
                    .map_err(|e| super::disk::DiskError::Dir { path: path.clone(), source: e })?;
                tracing::error!(resource = %self.cache.label(), error = %error_chain(&err), moved_to = %to.display(), "the persist store does not open after a write error; moved aside, writing it anew");
                metrics::counter!(m::PERSIST_STORES_MOVED_ASIDE, "resource" => self.cache.label().to_owned())
                    .increment(1);
                self.store.reopen()
            }
            other => other,
        }
    }

    /// Gives the file's free pages back when they are many (between
    /// commits, on this thread: the cache never waits for it).
    fn compact(&mut self, label: &str) {
        let started = Instant::now();
        match self.store.compact_if_loose() {
            Ok(Some(c)) => tracing::info!(
                resource = %label,
                before = c.before,
                after = c.after,
                took = ?started.elapsed(),
                "compacted the persisted store"
            ),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(resource = %label, error = %error_chain(&err), "compacting the persisted store failed; it stays as it was")
            }
        }
    }

    /// The cache's whole current state; `None` before its first list (a
    /// store at version 0 would restore as an empty cache).
    fn whole_batch(&self) -> Option<Batch> {
        let snapshot = self.cache.snapshot();
        if snapshot.rv == 0 {
            return None;
        }
        let changes = snapshot.objects.iter().map(|(k, o)| (k.clone(), Some(self.stored(k, o.json())))).collect();
        Some(Batch {
            rv: snapshot.rv,
            generation: self.generation + 1,
            whole: true,
            header: Some(self.header.clone()),
            changes,
        })
    }

    /// The queued changes newer than the store, last one per key winning;
    /// `None` when there are none.
    fn coalesce(&self, notes: &mut Vec<Note>) -> Option<Batch> {
        let mut latest = std::collections::BTreeMap::new();
        let mut rv = self.written_rv;
        for note in notes.drain(..) {
            match note {
                Note::Changed { rv: at, key, json } if at > self.written_rv => {
                    rv = rv.max(at);
                    let stored = json.map(|j| self.stored(&key, &j));
                    latest.insert(key, stored);
                }
                Note::Version(at) => rv = rv.max(at),
                Note::Changed { .. } | Note::Whole | Note::Identity(_) => {}
            }
        }
        // A store's first commit names its resource, whatever kind it is.
        let first = self.written_rv == 0;
        let header = (first || self.header_changed).then(|| self.header.clone());
        // A new header alone is worth a commit once the store holds a state.
        (rv > self.written_rv || (self.header_changed && !first)).then(|| Batch {
            rv,
            generation: self.generation + 1,
            whole: false,
            header,
            changes: latest.into_iter().collect(),
        })
    }

    /// An object's bytes as stored: sealed when encryption is on, else
    /// deflated (`squeeze.rs`).
    fn stored(&self, key: &ObjectKey, json: &Bytes) -> Bytes {
        match &self.sealer {
            Some(sealer) => sealer.seal(&super::sealed_as(self.cache.label(), key), json),
            None => super::squeeze::pack(json),
        }
    }
}

#[cfg(test)]
mod tests;
