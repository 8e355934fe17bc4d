//! One watcher: opens its watch (its own connection for HTTP/1.1, a stream on
//! a shared connection for HTTP/2), then reads events until the bench stops
//! it, keeping the first receipt time of every sequence number, and resumes
//! the watch when the server closes it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::common::client::{Sender, Shape, Target};
use crate::common::lines::{End, find_rv, find_seq, read_lines};

/// Counters every watcher of a side shares.
#[derive(Default)]
pub struct Shared {
    pub opened: AtomicUsize,
    pub failed: AtomicUsize,
    /// The sequence numbers of the cell being measured: `lo < seq <= hi`.
    pub cell_lo: AtomicU64,
    pub cell_hi: AtomicU64,
    /// First receipts of the current cell's sequence numbers, over all watchers.
    pub cell_received: AtomicU64,
}

impl Shared {
    pub fn set_cell(&self, lo: u64, hi: u64) {
        self.cell_received.store(0, Ordering::SeqCst);
        self.cell_lo.store(lo, Ordering::SeqCst);
        self.cell_hi.store(hi, Ordering::SeqCst);
    }
}

/// What one watcher saw.
#[derive(Default)]
pub struct Outcome {
    pub status: Option<StatusCode>,
    pub open_error: Option<String>,
    /// First receipt of each sequence number.
    pub first_seen: Vec<(u32, Instant)>,
    seen: Vec<u64>,
    pub duplicates: u32,
    pub error_events: u32,
    /// Lines that carried no sequence number of this run (bookmarks, other objects).
    pub other_lines: u32,
    pub bytes: u64,
    pub end: Option<End>,
    /// Watches the server closed and this watcher resumed.
    pub resumed: u32,
    pub first_error_line: Option<String>,
}

impl Outcome {
    fn on_line(&mut self, line: &[u8], now: Instant, shared: &Shared) {
        self.bytes += line.len() as u64 + 1;
        if line.starts_with(b"{\"type\":\"ERROR\"") {
            self.error_events += 1;
            if self.first_error_line.is_none() {
                self.first_error_line = Some(String::from_utf8_lossy(&line[..line.len().min(300)]).into_owned());
            }
            return;
        }
        match find_seq(line) {
            Some(seq) if seq >= 1 && (seq as usize) <= self.seen.len() * 64 => {
                let (word, bit) = ((seq - 1) as usize / 64, 1u64 << ((seq - 1) % 64));
                if self.seen[word] & bit != 0 {
                    self.duplicates += 1;
                } else {
                    self.seen[word] |= bit;
                    self.first_seen.push((seq as u32, now));
                    if seq > shared.cell_lo.load(Ordering::Relaxed) && seq <= shared.cell_hi.load(Ordering::Relaxed) {
                        shared.cell_received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ => self.other_lines += 1,
        }
    }
}

/// Bound on how often one watcher resumes a watch the server closed.
const MAX_RESUMES: u32 = 50;

/// Everything a watcher needs; `max_seq` bounds the sequence numbers it tracks.
#[derive(Clone)]
pub struct WatchSpec {
    pub target: Target,
    pub shape: Shape,
    /// The watch without its resourceVersion (`...?watch=1`).
    pub base_path: Arc<str>,
    /// Where the first watch starts.
    pub rv: Arc<str>,
    pub permits: Arc<Semaphore>,
    pub shared: Arc<Shared>,
    pub stop: CancellationToken,
    pub max_seq: u64,
}

/// Opens one watch: on `conn` if given and still open, else on a new connection.
async fn open(
    spec: &WatchSpec,
    conn: Option<Sender>,
    rv: &str,
) -> anyhow::Result<(Sender, http::Response<hyper::body::Incoming>)> {
    let _permit = spec.permits.acquire().await.expect("semaphore open");
    let attempt = async {
        let sender = match conn.filter(|c| !c.is_closed()) {
            Some(s) => s,
            None => spec.target.connect(spec.shape).await?,
        };
        let resp =
            sender.send(spec.target.request(spec.shape, &format!("{}&resourceVersion={rv}", spec.base_path))).await?;
        anyhow::Ok((sender, resp))
    };
    tokio::select! {
        _ = spec.stop.cancelled() => Err(anyhow!("cancelled while opening")),
        r = attempt => r,
    }
}

/// One watcher. When the server closes its watch (kube-apiserver closes
/// watchers it finds too slow), it resumes from the last resourceVersion it
/// saw, as a reflector does, so an event is lost only if it is never replayed.
pub async fn run_watcher(spec: WatchSpec, conn: Option<Sender>) -> Outcome {
    let mut out = Outcome { seen: vec![0; (spec.max_seq as usize).div_ceil(64)], ..Default::default() };
    let mut rv = spec.rv.to_string();
    let mut conn = conn;
    let mut first = true;
    loop {
        let (sender, resp) = match open(&spec, conn.take(), &rv).await {
            Ok(pair) => pair,
            Err(e) => {
                if first {
                    out.open_error = Some(format!("{e:#}"));
                    spec.shared.failed.fetch_add(1, Ordering::Relaxed);
                } else {
                    out.end = Some(End::Error(format!("resuming: {e:#}")));
                }
                return out;
            }
        };
        if resp.status() != StatusCode::OK {
            let status = resp.status();
            let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await;
            let text = body.ok().and_then(|b| b.ok()).map(|b| b.to_bytes()).unwrap_or_default();
            let text = String::from_utf8_lossy(&text[..text.len().min(300)]).into_owned();
            if first {
                out.status = Some(status);
                out.open_error = Some(text);
                spec.shared.failed.fetch_add(1, Ordering::Relaxed);
            } else {
                out.end = Some(End::Error(format!("resuming: {status}: {text}")));
            }
            return out;
        }
        if first {
            out.status = Some(resp.status());
            spec.shared.opened.fetch_add(1, Ordering::Relaxed);
            first = false;
        }
        let shared = spec.shared.clone();
        let errors_before = out.error_events;
        let mut last_rv = None;
        let end = read_lines(resp.into_body(), &spec.stop, |line, now| {
            if let Some(v) = find_rv(line) {
                last_rv = Some(v);
            }
            out.on_line(line, now, &shared)
        })
        .await;
        // Cancelled, an ERROR event (410: nothing to resume from), or resumed too often: done.
        if end == End::Cancelled || out.error_events > errors_before || out.resumed >= MAX_RESUMES {
            out.end = Some(end);
            return out;
        }
        out.resumed += 1;
        if let Some(v) = last_rv {
            rv = v.to_string();
        }
        conn = Some(sender);
    }
}
