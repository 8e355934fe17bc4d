//! Fairness for the reads watchmux answers from its cache: one client's
//! storm of LISTs cannot starve the kubelets.
//!
//! The API server's Priority and Fairness (APF) protects it, but a read the
//! cache answers never reaches it: without limits here, one client running
//! a hundred LISTs of 10,000 pods in a loop takes every core of the proxy
//! that every kubelet of the node (or the tier) syncs through. So cached
//! LISTs and watch starts take a seat, as APF's do:
//!
//! - Seats (`--fairness-seats`) are split between the priority levels of
//!   APF's default configuration by their nominal shares ([`level`]) in
//!   delegated mode (in trusted-local mode every client is watchmux: one
//!   level has every seat, and connections are the flows):
//!   kubelets (`node-high`, `system`) and kube-system's controllers
//!   (`workload-high`) have seats of their own, apart from workloads'
//!   service accounts (`workload-low`) and other users and anonymous
//!   (`global-default`). `system:masters` is exempt.
//! - Within a level, each flow (a user; in trusted-local mode, a client
//!   connection) queues on its own, and waiting flows take turns
//!   ([`crate::fair_queue`]): one flow's queue delays another by at most
//!   one request per flow ahead of it.
//! - A seat bounds building an answer, not the client's reading of it
//!   ([`Seat::held_by`]). A LIST gives its seat back once its answer is
//!   built (its items are the cache's shared encodings, spliced: what is
//!   left to write is bytes already in memory), before its head is sent;
//!   one compressed as it is read, once it is written; a watch once its
//!   initial events are (its body first has nothing to send). An answer
//!   still being built that has waited 1 s in all for its client to ask
//!   for more, or that was held 60 s (the API server's request timeout),
//!   gives its seat back and is finished without one: one user cannot hold
//!   a level's seats by not reading. Watch starts are also limited per flow
//!   and second (`--fairness-watch-starts-per-second`).
//! - A request that finds its flow's queue full (300: APF's hand of six
//!   queues of 50), that waits longer than `--fairness-queue-wait`, or that
//!   starts a watch over its flow's rate gets the API server's own 429 (plain text,
//!   `Retry-After: 1`), counted in `watchmux_fairness_rejected_total` by
//!   priority level and reason.
//!
//! The seat is taken once the read is authorized (the API server takes it
//! before): authorization here is a review sent upstream, and a burst
//! waiting on one review would fill the queues. Reads that pass through are
//! the API server's to limit, with the caller's identity (impersonated or
//! its own), and take no seat here.

pub(crate) mod level;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use metrics::counter;
use tokio::time::Instant;

use crate::body::{self, BoxError, Chunk, ProxyBody};
use crate::fair_queue::{FairSlots, QueueFull, Slot};
use crate::metrics as m;
pub(crate) use level::{Flow, FlowKey, PriorityLevel};

/// How many requests one flow may have waiting for a seat: what APF's
/// queues hold for one flow by default (its hand of 6 queues of 50).
const QUEUE_LENGTH: usize = 6 * 50;

/// Watch-start buckets kept per level before full (idle) ones are dropped.
const BUCKETS_KEPT: usize = 10_000;

/// `--fairness-*`.
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessSettings {
    /// Seats over every limited level; 0 turns fairness off.
    pub seats: usize,
    /// The longest a request waits for a seat before its 429.
    pub queue_wait: Duration,
    /// Watch starts per second one flow may make, on average.
    pub watch_starts_per_second: f64,
    /// Watch starts one flow may make at once.
    pub watch_start_burst: f64,
}

impl Default for FairnessSettings {
    fn default() -> Self {
        Self {
            seats: 100,
            queue_wait: Duration::from_secs(15),
            // Generous: an informer factory starts a few dozen watches, a
            // test or a tier's client a thousand at once, and the API server
            // limits none of them by rate; this is for floods. Their initial
            // events are bounded by the seats.
            watch_starts_per_second: 100.0,
            watch_start_burst: 2000.0,
        }
    }
}

/// The seats of every level.
pub(crate) struct Fairness {
    levels: HashMap<PriorityLevel, Level>,
    settings: FairnessSettings,
}

struct Level {
    seats: Arc<FairSlots<FlowKey>>,
    starts: parking_lot::Mutex<HashMap<FlowKey, Bucket>>,
}

/// A token bucket of watch starts.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Why a request got 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejected {
    QueueFull,
    QueueWait,
    WatchRate,
}

impl Rejected {
    fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::QueueWait => "queue_wait",
            Self::WatchRate => "watch_rate",
        }
    }
}

impl Fairness {
    /// The levels these settings describe, APF's defaults with `by_identity`
    /// (delegated mode) and otherwise one level, `global-default`, with
    /// every seat (trusted-local: every client is watchmux, only connections
    /// tell them apart); `None` when fairness is off.
    pub(crate) fn new(settings: FairnessSettings, by_identity: bool) -> Option<Arc<Self>> {
        if settings.seats == 0 {
            return None;
        }
        let limited: &[PriorityLevel] =
            if by_identity { &PriorityLevel::LIMITED } else { &[PriorityLevel::GlobalDefault] };
        let total_shares: usize = limited.iter().map(|l| l.shares()).sum();
        let levels = limited
            .iter()
            .map(|&level| {
                // Rounded up, as APF's nominal concurrency limits are.
                let seats = (settings.seats * level.shares()).div_ceil(total_shares);
                let waiting = metrics::gauge!(m::FAIRNESS_WAITING, "priority_level" => level.as_str());
                metrics::gauge!(m::FAIRNESS_SEATS, "priority_level" => level.as_str()).set(seats as f64);
                // A flow alone may use every seat of its level (APF is
                // work-conserving); flows that wait take turns.
                let seats = FairSlots::new(seats, seats, QUEUE_LENGTH, waiting);
                (level, Level { seats, starts: parking_lot::Mutex::default() })
            })
            .collect();
        Some(Arc::new(Self { levels, settings }))
    }

    /// A seat for one cached read of `flow` (a watch when `watch`), or the
    /// 429 to answer instead.
    pub(crate) async fn admit(&self, flow: &Flow, watch: bool) -> Result<Seat, body::Refusal> {
        // Exempt (`system:masters`) has no seats to take.
        let Some(level) = self.levels.get(&flow.level) else {
            return Ok(Seat { slot: None, level: flow.level, watch });
        };
        if watch && !self.take_watch_start(level, &flow.key) {
            return Err(refuse(flow.level, Rejected::WatchRate));
        }
        match tokio::time::timeout(self.settings.queue_wait, level.seats.acquire(&flow.key)).await {
            Ok(Ok(slot)) => Ok(Seat { slot: Some(slot), level: flow.level, watch }),
            Ok(Err(QueueFull)) => Err(refuse(flow.level, Rejected::QueueFull)),
            Err(_) => Err(refuse(flow.level, Rejected::QueueWait)),
        }
    }

    fn take_watch_start(&self, level: &Level, key: &FlowKey) -> bool {
        let (rate, burst) = (self.settings.watch_starts_per_second, self.settings.watch_start_burst);
        let now = Instant::now();
        let mut starts = level.starts.lock();
        if starts.len() >= BUCKETS_KEPT {
            // A full bucket is the same as none.
            starts.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let bucket = starts.entry(key.clone()).or_insert(Bucket { tokens: burst, at: now });
        bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The API server's 429 for a request APF rejected, counted by level.
fn refuse(level: PriorityLevel, why: Rejected) -> body::Refusal {
    counter!(m::FAIRNESS_REJECTED, "priority_level" => level.as_str(), "reason" => why.as_str()).increment(1);
    let mut resp = Response::new(body::full(Bytes::from_static(b"Too many requests, please try again later.\n")));
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    Box::new(resp)
}

/// One cached read's seat (none for an exempt caller).
pub(crate) struct Seat {
    slot: Option<Slot<FlowKey>>,
    level: PriorityLevel,
    watch: bool,
}

/// The longest a read keeps its seat while its answer is still being built
/// and its client reads it: the API server's default request timeout, past
/// which its own handler (and APF's seat) would have ended.
const SEAT_MAX_HOLD: Duration = Duration::from_secs(60);

/// How long, in all, an answer still being built may wait for its client to
/// take what it has written before its seat is taken back: the seat is for
/// building the answer, and a client that reads keeps asking for the next
/// bytes within microseconds. A client that does not (a zero window, a
/// stalled reader) gets the rest of its answer built without a seat.
const READ_WAIT_BUDGET: Duration = Duration::from_secs(1);

impl Seat {
    /// `resp`, its seat held for as long as building the answer takes.
    ///
    /// A body that knows its exact length here is bytes already in memory
    /// (a LIST's items are the cache's shared encodings, spliced, and its
    /// head and tail are written): the answer is built, and the seat goes
    /// back before the head is sent, however slowly the client then reads.
    /// kube-apiserver's handler, too, ends (and APF's seat with it) once it
    /// has written a small answer into the server's buffers.
    ///
    /// Any other body builds as it is read: a compressed answer is
    /// compressed, a watch's initial events are encoded. Its seat is held
    /// until the body ends (a watch: until it first has nothing to send, its
    /// initial events written), and taken back early once the body has
    /// waited [`READ_WAIT_BUDGET`] in all for its client to ask for more, or
    /// after [`SEAT_MAX_HOLD`]: a client's reading speed cannot keep a seat.
    pub(crate) fn held_by(self, resp: Response<ProxyBody>) -> Response<ProxyBody> {
        let Some(slot) = self.slot else { return resp };
        if resp.body().size_hint().exact().is_some() {
            drop(slot);
            return resp;
        }
        let now = Instant::now();
        let hold = Arc::new(parking_lot::Mutex::new(Hold {
            slot: Some(slot),
            until: now + SEAT_MAX_HOLD,
            waiting_since: Some(now),
            waited: Duration::ZERO,
        }));
        let expiry = tokio::spawn(take_back_when_unread(Arc::downgrade(&hold), self.level)).abort_handle();
        let held = Held { hold, expiry };
        resp.map(|inner| {
            body::boxed_chunks(SeatedBody { inner, held: Some(held), level: self.level, watch: self.watch })
        })
    }
}

/// A seat held by an answer being built, and how long the answer has waited
/// for its client.
struct Hold {
    /// `None` once given back.
    slot: Option<Slot<FlowKey>>,
    /// [`SEAT_MAX_HOLD`] after the answer's head.
    until: Instant,
    /// Since when the body has had a frame out and waits to be asked for the
    /// next (from its head on: the client has not asked for anything yet);
    /// `None` while it is building or waits for something else.
    waiting_since: Option<Instant>,
    /// The waits for the client that ended, summed.
    waited: Duration,
}

impl Hold {
    /// How long the answer has waited for its client, in all, at `now`.
    fn waited(&self, now: Instant) -> Duration {
        self.waited + self.waiting_since.map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }

    /// Whether the seat is to be taken back at `now`.
    fn expired(&self, now: Instant) -> bool {
        now >= self.until || self.waited(now) >= READ_WAIT_BUDGET
    }

    /// The earliest the seat may expire, from `now`: the wait budget's end
    /// if the client is being waited for from now on.
    fn next_check(&self, now: Instant) -> Instant {
        self.until.min(now + READ_WAIT_BUDGET.saturating_sub(self.waited(now)))
    }
}

/// Takes the seat back once its answer has waited for its client too long
/// (or was held too long); ends when the seat is back, or its body is gone.
/// Its wake-ups are at least a budget's worth of reading apart while the
/// client reads, so an answer read for a minute wakes it 60 times at most.
async fn take_back_when_unread(hold: std::sync::Weak<parking_lot::Mutex<Hold>>, level: PriorityLevel) {
    loop {
        let next = {
            let Some(hold) = hold.upgrade() else { return };
            let hold = hold.lock();
            if hold.slot.is_none() {
                return;
            }
            hold.next_check(Instant::now())
        };
        tokio::time::sleep_until(next).await;
        let Some(hold) = hold.upgrade() else { return };
        let taken = {
            let mut hold = hold.lock();
            if hold.expired(Instant::now()) { hold.slot.take() } else { None }
        };
        if let Some(slot) = taken {
            counter!(m::FAIRNESS_UNREAD, "priority_level" => level.as_str()).increment(1);
            drop(slot);
            return;
        }
    }
}

/// A seat a body holds, and the task that takes it back from a client that
/// does not read (stopped when the body gives it back first).
struct Held {
    hold: Arc<parking_lot::Mutex<Hold>>,
    expiry: tokio::task::AbortHandle,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.expiry.abort();
    }
}

/// A response body that gives its seat back when it ends, or (a watch) when
/// it first has nothing to send, and that tells its [`Hold`] when it waits
/// for its client. Once the seat is back it only passes frames on.
struct SeatedBody {
    inner: ProxyBody,
    held: Option<Held>,
    level: PriorityLevel,
    watch: bool,
}

impl Body for SeatedBody {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let Some(held) = &self.held else {
            return Pin::new(&mut self.inner).poll_frame(cx);
        };
        // The client asks for more: its wait ends here (and may have
        // outlasted the budget before the timer saw it).
        let hold = held.hold.clone();
        let unread = {
            let mut hold = hold.lock();
            let now = Instant::now();
            if let Some(since) = hold.waiting_since.take() {
                hold.waited += now.saturating_duration_since(since);
            }
            let expired = hold.slot.is_some() && hold.expired(now);
            (hold.slot.is_none() || expired).then(|| hold.slot.take())
        };
        if let Some(taken) = unread {
            if taken.is_some() {
                counter!(m::FAIRNESS_UNREAD, "priority_level" => self.level.as_str()).increment(1);
            }
            drop(taken);
            self.held = None;
            return Pin::new(&mut self.inner).poll_frame(cx);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let done = match &polled {
            Poll::Pending => self.watch,
            Poll::Ready(None | Some(Err(_))) => true,
            // Its last frame: nothing more to build.
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
        };
        if done {
            self.held = None;
        } else if polled.is_ready() {
            // A frame is out: from now on the body waits for its client.
            hold.lock().waiting_since = Some(Instant::now());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
