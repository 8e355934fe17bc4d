//! The watchers on watchmux: kubelet-shaped ones (`fieldSelector=spec.nodeName=<node>`,
//! one per node) and unselected ones (every pod), many streams to an h2c
//! connection, all from the LIST's resourceVersion. Each line received is
//! matched to its event by resourceVersion, and its lag (upstream write →
//! this receipt, one clock: the bench holds both ends) goes into the phase's
//! histogram for its kind of watcher.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::StatusCode;
use tokio_util::sync::CancellationToken;

use crate::common::client::{Sender, Shape, Target};
use crate::common::lines::{End, find_rv, read_lines};
use crate::synthetic::pods::{Pods, RV_BASE, node_name};
use crate::synthetic::upstream::Replay;

/// Sub-buckets per power of two in a [`Histogram`] (about 6 % wide).
const SUB: u64 = 16;
const BUCKETS: usize = 64 * SUB as usize;

/// A log-linear histogram of microseconds, shared by every watcher.
pub struct Histogram {
    buckets: Vec<AtomicU64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl Histogram {
    fn index(us: u64) -> usize {
        if us < SUB {
            return us as usize;
        }
        let power = 63 - us.leading_zeros() as u64; // >= 4
        let mantissa = us >> (power - 4); // 16..32
        ((power - 3) * SUB + (mantissa - SUB)) as usize
    }

    /// The middle of bucket `i`, in microseconds.
    fn value(i: usize) -> f64 {
        let i = i as u64;
        if i < SUB {
            return i as f64;
        }
        let power = i / SUB + 3;
        let width = 1u64 << (power - 4);
        ((SUB + i % SUB) * width) as f64 + width as f64 / 2.0
    }

    pub fn record(&self, lag: Duration) {
        let us = lag.as_micros().min(u64::MAX as u128) as u64;
        self.buckets[Self::index(us).min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The `q` quantile in milliseconds (the middle of its bucket).
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64 - 1.0) * q).round() as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen > rank {
                return Some(Self::value(i) / 1000.0);
            }
        }
        None
    }
}

/// What one phase's receipts came to, over every watcher.
#[derive(Default)]
pub struct PhaseReceipts {
    pub selected: Histogram,
    pub unselected: Histogram,
    pub received_selected: AtomicU64,
    pub received_unselected: AtomicU64,
    /// The latest receipt by a kubelet's watcher and by an unselected one,
    /// nanoseconds after the epoch.
    pub last_receipt_selected: AtomicU64,
    pub last_receipt_unselected: AtomicU64,
}

/// Counters over the whole run.
#[derive(Default)]
pub struct Totals {
    pub opened: AtomicU64,
    pub failed: AtomicU64,
    pub ended: AtomicU64,
    pub errors: AtomicU64,
    pub error_events: AtomicU64,
    /// Events a kubelet got for another node's pod (a selector bug).
    pub misrouted: AtomicU64,
    /// Events received again or out of order.
    pub out_of_order: AtomicU64,
    pub bookmarks: AtomicU64,
}

/// Every phase's receipts, and which events make each phase.
pub struct Receipts {
    /// `(first, last)` event of each phase, in order.
    pub phases: Vec<(u64, u64)>,
    pub per_phase: Vec<PhaseReceipts>,
    pub totals: Totals,
    pub epoch: Instant,
}

impl Receipts {
    pub fn new(phases: Vec<(u64, u64)>, epoch: Instant) -> Arc<Self> {
        let per_phase = phases.iter().map(|_| PhaseReceipts::default()).collect();
        Arc::new(Self { phases, per_phase, totals: Totals::default(), epoch })
    }

    fn phase_of(&self, seq: u64) -> Option<&PhaseReceipts> {
        let i = self.phases.iter().position(|&(first, last)| (first..=last).contains(&seq))?;
        Some(&self.per_phase[i])
    }
}

/// One watcher: `node` for a kubelet's, `None` for an unselected one.
pub struct Watcher {
    pub node: Option<usize>,
    pub conn: Sender,
    pub target: Target,
    pub replay: Arc<Replay>,
    pub pods: Arc<Pods>,
    pub receipts: Arc<Receipts>,
    pub stop: CancellationToken,
}

impl Watcher {
    fn path(&self) -> String {
        let selector = match self.node {
            Some(node) => format!("fieldSelector=spec.nodeName%3D{}&", node_name(node)),
            None => String::new(),
        };
        format!("/api/v1/pods?{selector}resourceVersion={RV_BASE}&allowWatchBookmarks=true&watch=true")
    }

    /// Opens the watch (signalling `opened` once answered) and reads it until stopped.
    pub async fn run(self, opened: tokio::sync::mpsc::Sender<bool>) {
        let totals = &self.receipts.totals;
        let req = self.target.request(Shape::H2, &self.path());
        let resp = match self.conn.send(req).await {
            Ok(resp) if resp.status() == StatusCode::OK => resp,
            Ok(resp) => {
                eprintln!("ingest: watch {:?} answered {}", self.node, resp.status());
                totals.failed.fetch_add(1, Ordering::Relaxed);
                let _ = opened.send(false).await;
                return;
            }
            Err(e) => {
                eprintln!("ingest: watch {:?}: {e:#}", self.node);
                totals.failed.fetch_add(1, Ordering::Relaxed);
                let _ = opened.send(false).await;
                return;
            }
        };
        totals.opened.fetch_add(1, Ordering::Relaxed);
        let _ = opened.send(true).await;
        drop(opened);
        let mut last_seq = 0;
        let end = read_lines(resp.into_body(), &self.stop, |line, now| {
            if line.starts_with(b"{\"type\":\"BOOKMARK\"") {
                totals.bookmarks.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if line.starts_with(b"{\"type\":\"ERROR\"") {
                totals.error_events.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let Some(seq) = find_rv(line).and_then(|rv| rv.checked_sub(RV_BASE)) else { return };
            if seq <= last_seq {
                totals.out_of_order.fetch_add(1, Ordering::Relaxed);
                return;
            }
            last_seq = seq;
            if self.node.is_some_and(|node| node != self.pods.node_of(seq)) {
                totals.misrouted.fetch_add(1, Ordering::Relaxed);
            }
            let Some(phase) = self.receipts.phase_of(seq) else { return };
            let (histogram, received, last_receipt) = match self.node {
                Some(_) => (&phase.selected, &phase.received_selected, &phase.last_receipt_selected),
                None => (&phase.unselected, &phase.received_unselected, &phase.last_receipt_unselected),
            };
            if let Some(written) = self.replay.written_at(seq) {
                histogram.record(now.saturating_duration_since(written));
            }
            received.fetch_add(1, Ordering::Relaxed);
            last_receipt.fetch_max(now.duration_since(self.receipts.epoch).as_nanos() as u64, Ordering::Relaxed);
        })
        .await;
        match end {
            End::Cancelled => {}
            End::Ended => {
                totals.ended.fetch_add(1, Ordering::Relaxed);
            }
            End::Error(e) => {
                if totals.errors.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!("ingest: watch {:?} failed: {e}", self.node);
                }
            }
        }
    }
}

/// The histogram's buckets are ordered and hold their values (run at start).
pub fn self_check() {
    let mut last = 0;
    for us in [0u64, 1, 15, 16, 17, 31, 32, 33, 100, 1000, 12_345, 1 << 30] {
        let i = Histogram::index(us);
        assert!(i >= last, "{us}");
        last = i;
        let mid = Histogram::value(i);
        assert!((mid - us as f64).abs() <= (us as f64 / 16.0).max(0.5) + 0.5, "{us} -> {mid}");
    }
}
