//! The response body of a watch served from the cache.
//!
//! In order: the initial events (synthetic ADDED for a snapshot, or the history's events since the
//! watch's version);
//! the initial-events-end bookmark for a watch-list; then live events from
//! the watcher's queue, with bookmarks on the API server's schedule, until
//! the timeout, shutdown, or the resource going. A watcher that fell behind
//! live delivery reads the history ring from its position instead of its
//! queue until a ring read reaches the newest event (`resource/ring_read.rs`); no bookmark goes
//! out meanwhile, there being events to send. One that falls behind the
//! ring itself ends with 410.
//!
//! A Table watch of a custom resource is checked the same way
//! ([`WatchStream::table_prints`]), and a live row its printer refuses ends
//! the stream (`cache::table_form`).
//!
//! In protobuf, an object the encoder refuses cannot be sent. The serving
//! side checks the initial events before the stream starts
//! ([`WatchStream::protobuf_refusal`]: it then answers JSON or passes the
//! watch through); a live event that is refused ends the stream, like a
//! timeout: the client watches again from the last version it got, and that
//! watch, whose events since its version hold the refused one, is answered in JSON or
//! passed through.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use http_body::{Body, Frame};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::body::{BoxError, Chunk};
use crate::cache::delivery::filter::NODE_FIELD;
use crate::cache::delivery::watcher::{Delivery, Next, Terminated, WatcherHandle};
use crate::cache::resource::{Registration, ResourceCache};
use crate::cache::state::object::{CachedObject, NoProtobuf, ObjectKey};
use crate::cache::state::store::Snapshot;
use crate::cache::table_form::TableForm;
use crate::encode::status::{Status, StatusReason};
use crate::encode::variant::ContentVariant;
use crate::encode::watch::EventType;
use crate::encode::watch::{bookmark_frame, error_frame, event_frame};
use crate::metrics as m;
use http::StatusCode;

/// What one poll of a watch stream gives.
type Polled = Poll<Option<Result<Frame<Chunk>, BoxError>>>;

/// How often a watcher that asked for bookmarks gets one.
pub(crate) const BOOKMARK_FREQUENCY: Duration = Duration::from_secs(60);
/// A last bookmark goes out this long before a watch's deadline, so the
/// client can resume from it.
const BOOKMARK_BEFORE_DEADLINE: Duration = Duration::from_secs(2);

// client-go's reflector counts a watch that ends sooner than VERY_SHORT_WATCH
// with no event as failed and lists again; pass-through watches linger alike.
use crate::body::VERY_SHORT_WATCH;
/// Ring reads one poll may make when they find nothing for this watcher's
/// filter; past that the stream yields to the runtime and goes on later.
const RING_READS_PER_POLL: usize = 8;

/// The next bookmark time, as the API server computes it: every minute, and
/// once shortly before the deadline; none if that moment has passed.
pub(crate) fn next_bookmark_time(now: Instant, deadline: Instant) -> Option<Instant> {
    let heartbeat = now + BOOKMARK_FREQUENCY;
    let before_deadline = deadline.checked_sub(BOOKMARK_BEFORE_DEADLINE)?;
    let at = heartbeat.min(before_deadline);
    (at >= now).then_some(at)
}

/// Options of one watch stream.
pub(crate) struct StreamOptions {
    pub variant: ContentVariant,
    pub allow_bookmarks: bool,
    /// Send the initial-events-end bookmark after the initial events.
    pub initial_events_end: bool,
    pub timeout: Duration,
    pub stop: CancellationToken,
    /// Every event, bookmarks too, as a one-row `meta.k8s.io` Table
    /// (`cache::table_form`); the variant is then JSON.
    pub table: Option<TableForm>,
}

/// Walks the snapshot's objects a watcher's filter can match (one node's
/// from the node index, one namespace's, or all) in key order, without
/// holding a borrow across polls.
#[derive(Clone)]
struct SnapshotCursor {
    snapshot: Snapshot,
    /// Where the walk goes on; none before the first object.
    after: Option<ObjectKey>,
    done: bool,
}

impl SnapshotCursor {
    fn new(snapshot: Snapshot) -> Self {
        Self { snapshot, after: None, done: false }
    }

    fn next_matching(&mut self, handle: &WatcherHandle) -> Option<Arc<CachedObject>> {
        use std::ops::Bound;
        if self.done {
            return None;
        }
        let filter = &handle.filter;
        let lower = self.after.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
        let found = self
            .snapshot
            .candidates(filter.fields.exact(NODE_FIELD), filter.namespace.as_deref(), lower)
            .find(|(_, obj)| filter.matches(obj))
            .map(|(_, obj)| obj.clone());
        match &found {
            Some(obj) => self.after = Some(obj.key.clone()),
            None => self.done = true,
        }
        found
    }
}

/// Where a watch stream is; each phase sends its frames, then gives way to
/// the next, in this order.
enum Phase {
    /// A watch from the current state: the snapshot's matching objects, as
    /// ADDED, in key order.
    Snapshot(SnapshotCursor),
    /// A watch from a version: the history events the watcher missed.
    SinceVersion(std::collections::VecDeque<Delivery>),
    /// A watch-list with bookmarks: the initial events are out, the
    /// initial-events-end bookmark at this version is next.
    InitialEnd(u64),
    /// Live events from the watcher's queue, and bookmarks on the API
    /// server's schedule.
    Live,
    /// Ended (timeout, shutdown, the watcher ended, an event with no form
    /// in the stream's variant): nothing more.
    Finished,
}

pub(crate) struct WatchStream {
    cache: Arc<ResourceCache>,
    handle: Arc<WatcherHandle>,
    opts: StreamOptions,
    phase: Phase,
    /// The version the initial events bring the watcher to.
    start_rv: u64,
    /// Where delivery stands: every event up to it is sent or not this
    /// watcher's (the registration's version at first).
    last_sent_rv: u64,
    /// The version the client holds: the one it asked for, then the last
    /// event or bookmark sent. A bookmark goes out only past it, as the API
    /// server's does. Below `last_sent_rv` only for a watcher resumed from a
    /// backfill ([`WatchStream::resumed_from`]), which joins the cache at the
    /// backfill's end, past the version it asked for.
    told_rv: u64,
    /// How far this watcher's ring reads got (see `resource/ring_read.rs`);
    /// with `last_sent_rv`, every event up to the greater of the two is done with.
    ring_position: u64,
    deadline: Pin<Box<Sleep>>,
    deadline_at: Instant,
    /// Whether any frame went out: a stopped stream that sent none lingers
    /// until [`VERY_SHORT_WATCH`] (see [`WatchStream::stopped`]).
    sent_any: bool,
    bookmark: Option<Pin<Box<Sleep>>>,
    /// The server's stop token, polled once, at the first poll, with a
    /// waker that stops the watcher (see [`StopWatcher`]); kept, so that it
    /// stays registered.
    stop: Pin<Box<WaitForCancellationFutureOwned>>,
    stop_registered: bool,
    /// A Table watch has encoded a frame itself: later ones carry no column
    /// definitions (`cache::table_form`).
    table_headers_sent: bool,
}

/// The waker the stop token holds for one stream: cancelling the token
/// stops the watcher, which wakes its body through the watcher's queue.
///
/// Polling the token itself on every poll of every stream took its mutex
/// (and the notifier's) once per event per watcher, one lock shared by all
/// streams; registered once this way, shutdown costs a stream one atomic load
/// per poll.
struct StopWatcher(Arc<WatcherHandle>);

impl Wake for StopWatcher {
    fn wake(self: Arc<Self>) {
        self.0.stop();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.stop();
    }
}

impl WatchStream {
    pub(crate) fn new(cache: Arc<ResourceCache>, reg: Registration, opts: StreamOptions) -> Self {
        let now = Instant::now();
        let deadline_at = now + opts.timeout;
        let bookmark = if opts.allow_bookmarks {
            next_bookmark_time(now, deadline_at).map(|at| Box::pin(tokio::time::sleep_until(at)))
        } else {
            None
        };
        let phase = match reg.snapshot {
            Some(snapshot) => Phase::Snapshot(SnapshotCursor::new(snapshot)),
            None => Phase::SinceVersion(reg.since_version.into()),
        };
        let stop = Box::pin(opts.stop.clone().cancelled_owned());
        Self {
            cache,
            handle: reg.handle,
            opts,
            phase,
            start_rv: reg.start_rv,
            last_sent_rv: reg.start_rv,
            told_rv: reg.start_rv,
            ring_position: reg.start_rv,
            deadline: Box::pin(tokio::time::sleep_until(deadline_at)),
            deadline_at,
            sent_any: false,
            bookmark,
            stop,
            stop_registered: false,
            table_headers_sent: false,
        }
    }

    /// A watcher resumed from a backfill (`resource/backfill.rs`): it asked
    /// for `rv` and joins the cache past it, at the backfill's end, where the
    /// cache itself may not yet be (the backfill's upstream watch can be
    /// newer than the cache's). Its first bookmark goes out at its bookmark
    /// time at that end or later, as the API server's does for a watch from
    /// `rv`: an upstream watchmux's backfill (a tree) learns its version that
    /// way, on a quiet resource too.
    pub(crate) fn resumed_from(&mut self, rv: u64) {
        self.told_rv = rv.min(self.last_sent_rv);
    }

    /// What follows the initial events: the initial-events-end bookmark for
    /// a watch-list that allows bookmarks, else live events.
    fn after_initial_events(&self) -> Phase {
        if self.opts.initial_events_end && self.opts.allow_bookmarks {
            Phase::InitialEnd(self.start_rv)
        } else {
            Phase::Live
        }
    }

    fn frame(&mut self, chunk: Chunk) -> Polled {
        self.sent_any = true;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    /// The end of a stream the server stopped (shutdown, a connection's
    /// maximum age): at once, unless it has sent nothing and is younger than
    /// [`VERY_SHORT_WATCH`]. client-go's reflector takes a watch that ends
    /// within a second with nothing received for a failure ("very short
    /// watch") and lists again, the relist a rollout must not cost; so
    /// such a stream sends nothing more and ends a second after it
    /// started, and the client then resumes from its version as after any
    /// watch's end. Events in the meantime are not lost: the resumed watch
    /// has them. At most a second added to a shutdown.
    /// The linger is the deadline's own timer, brought forward: the stream
    /// ends there as at its deadline.
    fn stopped(&mut self, cx: &mut Context<'_>) -> Polled {
        let started = self.deadline_at - self.opts.timeout;
        let until = started + VERY_SHORT_WATCH;
        if self.sent_any || Instant::now() >= until {
            return self.end();
        }
        if self.deadline.deadline() > until {
            self.deadline.as_mut().reset(until);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => self.end(),
            Poll::Pending => Poll::Pending,
        }
    }

    fn end(&mut self) -> Polled {
        self.phase = Phase::Finished;
        Poll::Ready(None)
    }

    fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished)
    }

    /// Whether the next frame carries a Table watch's column definitions;
    /// none after this one, which the watcher encodes itself (a bookmark).
    fn table_headers(&mut self) -> bool {
        !std::mem::replace(&mut self.table_headers_sent, true)
    }

    fn bookmark_chunk(&mut self, rv: u64, initial_end: bool) -> Option<Chunk> {
        if self.opts.table.is_some() {
            let headers = self.table_headers();
            return self.opts.table.as_ref().map(|form| form.bookmark_frame(rv, initial_end, headers));
        }
        let info = &self.cache.shape.info;
        bookmark_frame(&info.kind, &info.api_version(), self.opts.variant, rv, initial_end)
            .inspect_err(|e| tracing::warn!(error = %e, "no protobuf bookmark for this kind; ending the watch"))
            .ok()
    }

    /// The frame of an event, or the end of the stream when the object has no
    /// form in a protobuf variant. `live`: an event from the watcher's queue
    /// or the ring, whose Table is shared by the watchers of its variant.
    fn event(&mut self, kind: EventType, object: &CachedObject, live: bool) -> Polled {
        if let Some(form) = &self.opts.table {
            // Only a frame this watcher encoded ends its headers (`cache::table_form`).
            let Some((chunk, made_here)) = form.event_frame(kind, object, !self.table_headers_sent, live) else {
                tracing::debug!(rv = object.rv, "a row the Table printer refuses; ending the watch");
                return self.end();
            };
            self.table_headers_sent |= made_here;
            return self.frame(chunk);
        }
        let variant = self.opts.variant;
        match object.encoded(variant) {
            Ok(bytes) => self.frame(event_frame(variant, kind, bytes)),
            Err(NoProtobuf { reason }) => {
                tracing::debug!(reason, rv = object.rv, "event with no protobuf form; ending the watch");
                metrics::counter!(m::PROTOBUF_WATCH_ENDED, "resource" => self.cache.label().to_owned()).increment(1);
                self.end()
            }
        }
    }

    /// The first initial event (snapshot or events since a version) that has no form in the
    /// stream's variant, before anything is sent; encoding them here is no
    /// extra work, each object's bytes being kept for the stream.
    pub(crate) fn protobuf_refusal(&self) -> Option<NoProtobuf> {
        let variant = self.opts.variant;
        if !variant.is_protobuf() {
            return None;
        }
        match &self.phase {
            Phase::Snapshot(cursor) => {
                let mut cursor = cursor.clone();
                while let Some(obj) = cursor.next_matching(&self.handle) {
                    if let Err(refused) = obj.encoded(variant) {
                        return Some(refused);
                    }
                }
                None
            }
            Phase::SinceVersion(events) => events.iter().find_map(|d| d.object().encoded(variant).err()),
            Phase::InitialEnd(_) | Phase::Live | Phase::Finished => None,
        }
    }

    /// Whether a Table watch's initial events all print (a custom resource's
    /// printer may refuse a row: the watch then passes through).
    pub(crate) fn table_prints(&self) -> bool {
        let Some(form) = &self.opts.table else { return true };
        match &self.phase {
            Phase::Snapshot(cursor) => {
                let mut cursor = cursor.clone();
                std::iter::from_fn(|| cursor.next_matching(&self.handle)).all(|obj| form.prints(&obj))
            }
            Phase::SinceVersion(events) => events.iter().all(|d| form.prints(d.object())),
            Phase::InitialEnd(_) | Phase::Live | Phase::Finished => true,
        }
    }

    /// Answers in another variant (the JSON of the same form), before the
    /// stream has started.
    pub(crate) fn switch_to(&mut self, variant: ContentVariant) {
        self.opts.variant = variant;
    }
}

impl WatchStream {
    /// Live events, and bookmarks when their time comes.
    fn poll_live(&mut self, cx: &mut Context<'_>) -> Polled {
        if let Some(queued) = self.take_queued(cx) {
            return queued;
        }
        if let Some(timer) = &mut self.bookmark
            && timer.as_mut().poll(cx).is_ready()
        {
            // Read the published version, then look at the queue once more:
            // each event is queued before its version is published, so if
            // the queue is still empty every event up to that version was
            // sent, and a bookmark at it tells the truth. (Read here, at
            // bookmark time, not at every poll of every watcher.)
            let published = self.cache.current_rv();
            if let Some(queued) = self.take_queued(cx) {
                return queued;
            }
            let now = Instant::now();
            self.bookmark = next_bookmark_time(now, self.deadline_at)
                .filter(|at| *at > now)
                .map(|at| Box::pin(tokio::time::sleep_until(at)));
            // Never behind what was delivered: a bookmark below an event
            // sent would send a client that resumes from it that event again.
            let at = published.max(self.last_sent_rv);
            if at > self.told_rv {
                self.last_sent_rv = at;
                self.told_rv = at;
                return match self.bookmark_chunk(at, false) {
                    Some(chunk) => self.frame(chunk),
                    None => self.end(),
                };
            }
            if let Some(timer) = &mut self.bookmark {
                let _ = timer.as_mut().poll(cx);
            }
        }
        Poll::Pending
    }

    /// The next event in the watcher's queue (read from the ring first when
    /// the watcher is behind), or the end the dispatcher gave it; `None`
    /// only while the queue is empty and the watcher on live delivery (the
    /// waker is then registered).
    fn take_queued(&mut self, cx: &mut Context<'_>) -> Option<Polled> {
        for _ in 0..RING_READS_PER_POLL {
            match self.handle.take(cx.waker()) {
                Ok(Next::Event(d)) => {
                    self.last_sent_rv = self.last_sent_rv.max(d.event.rv);
                    self.told_rv = self.told_rv.max(d.event.rv);
                    let frame = self.event(d.kind, d.object(), true);
                    if d.timed && !self.is_finished() {
                        // Returning the frame hands it to the connection: the
                        // fan-out histogram's end (see metrics::FANOUT_DURATION).
                        self.cache.fanout_handed(&d.event);
                    }
                    return Some(frame);
                }
                Ok(Next::Waiting) => return None,
                Ok(Next::FromRing { anew }) => {
                    // Anew, the dropped queue may have held the last read's
                    // deliveries: all that is done with is what was sent.
                    if anew {
                        self.ring_position = self.last_sent_rv;
                    }
                    let position = self.ring_position.max(self.last_sent_rv);
                    // On Err the watcher is expired: the next take says so.
                    if let Ok(reached) = self.cache.read_ring(&self.handle, position, self.last_sent_rv) {
                        self.ring_position = reached;
                    }
                }
                Err(Terminated::Ended | Terminated::Stopped) => return Some(self.end()),
                Err(Terminated::Expired(too_old)) => {
                    // The API server's answer to a watch from a version it
                    // cannot bridge; the client lists again.
                    self.phase = Phase::Finished;
                    let status = Status::new(StatusCode::GONE, StatusReason::Expired, too_old.to_string());
                    return Some(Poll::Ready(Some(Ok(Frame::data(error_frame(self.opts.variant, &status))))));
                }
            }
        }
        // Ring reads that found nothing for this filter: go on at the next poll.
        cx.waker().wake_by_ref();
        Some(Poll::Pending)
    }
}

impl Body for WatchStream {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = &mut *self;
        if this.is_finished() {
            return Poll::Ready(None);
        }
        // Shutdown and the timeout end the stream even when events are
        // waiting: the client resumes from the last version it received, as
        // after any watch timeout.
        if !this.stop_registered {
            this.stop_registered = true;
            let waker = Waker::from(Arc::new(StopWatcher(this.handle.clone())));
            if this.stop.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                return this.stopped(cx);
            }
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return this.end();
        }
        if this.handle.is_stopped() {
            return this.stopped(cx);
        }
        loop {
            match &mut this.phase {
                Phase::Snapshot(cursor) => match cursor.next_matching(&this.handle) {
                    Some(obj) => return this.event(EventType::Added, &obj, false),
                    None => this.phase = this.after_initial_events(),
                },
                Phase::SinceVersion(events) => match events.pop_front() {
                    Some(d) => {
                        this.last_sent_rv = this.last_sent_rv.max(d.event.rv);
                        this.told_rv = this.told_rv.max(d.event.rv);
                        return this.event(d.kind, d.object(), false);
                    }
                    None => this.phase = this.after_initial_events(),
                },
                Phase::InitialEnd(rv) => {
                    let rv = *rv;
                    this.phase = Phase::Live;
                    return match this.bookmark_chunk(rv, true) {
                        Some(chunk) => this.frame(chunk),
                        None => this.end(),
                    };
                }
                Phase::Live => return this.poll_live(cx),
                Phase::Finished => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.is_finished()
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.cache.deregister(&self.handle);
    }
}

#[cfg(test)]
mod tests;
