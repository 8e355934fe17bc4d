//! What pass-through answers may hold for clients that do not read them.
//!
//! A pass-through body is read from its upstream stream only as fast as the
//! downstream client takes it; until then the upstream stream buffers up to
//! its receive window (`upstream::streams::STREAM_WINDOW`) in watchmux. One
//! HTTP/2 connection with an initial window of 0 and 900 `GET /openapi/v2`
//! held about 1 MiB for each, 243 MiB in 25 s, more than the chart's
//! node-local memory limit. Two bounds here:
//!
//! - **A budget of stream windows.** An answer that is not long-running
//!   holds one window ([`Unit`]) of [`AnswerBudget`] from before it is sent
//!   upstream until its body ends or is dropped; one client (a source
//!   address; unix-socket clients share one) holds at most a quarter of
//!   them. A request that finds none gets kube-apiserver's 429 for too many
//!   requests, before anything is sent. A long-running answer (a watch,
//!   `logs -f`) would hold its window for hours while holding no bytes, so it
//!   takes one only while it is behind: from handing a chunk downstream
//!   (or its head) until the client's side asks for the next.
//! - **A stall deadline.** hyper's HTTP/2 server polls a body for a chunk,
//!   then waits for the client's window before polling again: a body cannot
//!   see the client not reading. So each answer has a watchdog ([`watch`]):
//!   behind for `--passthrough-stall-timeout` (a second when it found no
//!   window of the budget), it looks whether the upstream has bytes waiting;
//!   if so the upstream body is dropped (its stream reset, its buffer freed)
//!   and the next poll of the downstream body fails, which resets that stream
//!   too. A watch whose client's window is shut but that has no event to send
//!   holds nothing and is left alone.
//!
//! What is left after a stall, until the client resets the stream or leaves:
//! the one chunk hyper holds for it (an upstream DATA frame, at most 16 KiB)
//! and the stream's slot, 100 of them per connection.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use metrics::{counter, gauge};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::body::{BoxError, Chunk, ProxyBody};
use crate::metrics as m;

/// How long an answer may stay behind with no window of the budget.
const UNBUDGETED_STALL: Duration = Duration::from_secs(1);

/// Windows of pass-through answers that may be held at once, in all and
/// by one client.
#[derive(Debug)]
pub(crate) struct AnswerBudget {
    units: usize,
    per_client: usize,
    unit_bytes: u64,
    state: parking_lot::Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    held: usize,
    by_client: HashMap<Option<IpAddr>, usize>,
}

impl AnswerBudget {
    /// A budget of `bytes` in windows of `unit_bytes` (at least one each
    /// in all and for one client); `bytes` 0: no budget.
    pub(crate) fn new(bytes: u64, unit_bytes: u64) -> Option<Arc<Self>> {
        if bytes == 0 {
            return None;
        }
        let units = usize::try_from(bytes / unit_bytes.max(1)).unwrap_or(usize::MAX).max(1);
        let per_client = (units / 4).max(1);
        Some(Arc::new(Self { units, per_client, unit_bytes, state: Default::default() }))
    }

    /// A window for `client`, or `None` when the budget or the client's
    /// share is used up.
    pub(crate) fn take(self: &Arc<Self>, client: Option<IpAddr>) -> Option<Unit> {
        let mut state = self.state.lock();
        let of_client = state.by_client.get(&client).copied().unwrap_or(0);
        if state.held >= self.units || of_client >= self.per_client {
            return None;
        }
        state.held += 1;
        *state.by_client.entry(client).or_default() += 1;
        gauge!(m::PASSTHROUGH_BUFFER_RESERVED).increment(self.unit_bytes as f64);
        Some(Unit { budget: self.clone(), client })
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.state.lock().held
    }
}

/// One window of an [`AnswerBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Unit {
    budget: Arc<AnswerBudget>,
    client: Option<IpAddr>,
}

impl Drop for Unit {
    fn drop(&mut self) {
        let mut state = self.budget.state.lock();
        state.held -= 1;
        if let std::collections::hash_map::Entry::Occupied(mut e) = state.by_client.entry(self.client) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        gauge!(m::PASSTHROUGH_BUFFER_RESERVED).decrement(self.budget.unit_bytes as f64);
    }
}

/// How a [`Metered`] body holds the budget.
pub(crate) enum Hold {
    /// A window for the body's whole life, taken before it was sent.
    Whole(Option<Unit>),
    /// A window only while behind, taken from `budget` for `client` (a
    /// long-running answer).
    WhileBehind { budget: Option<Arc<AnswerBudget>>, client: Option<IpAddr> },
}

/// The state a body and its watchdog share.
struct Shared {
    /// The upstream body; `None` once it ended or was dropped for a stall.
    body: Option<ProxyBody>,
    /// Since when the client's side has not asked for the next chunk.
    behind_since: Option<Instant>,
    /// The window held while behind, for a long-running answer.
    unit: Option<Unit>,
    /// The window held for the whole life of another answer.
    whole: Option<Unit>,
    /// The limit the body was cut off at.
    stalled: Option<Duration>,
}

impl Shared {
    fn limit(&self, stall: Duration) -> Duration {
        if self.unit.is_some() || self.whole.is_some() { stall } else { stall.min(UNBUDGETED_STALL) }
    }
}

/// A pass-through body under the budget and the stall watchdog.
pub(crate) struct Metered {
    shared: Arc<parking_lot::Mutex<Shared>>,
    hold: Hold,
    /// Dropped with the body: ends the watchdog.
    _done: oneshot::Sender<()>,
}

/// Why a body was cut off.
#[derive(Debug, thiserror::Error)]
#[error("the client did not read the answer for {0:?} while the upstream had more: its stream was reset")]
pub(crate) struct Stalled(Duration);

/// `body` under `hold`, watched for stalls of `stall`.
pub(crate) fn watch(body: ProxyBody, mut hold: Hold, stall: Duration) -> ProxyBody {
    let (whole, unit) = match &mut hold {
        Hold::Whole(unit) => (unit.take(), None),
        Hold::WhileBehind { budget, client } => (None, budget.as_ref().and_then(|b| b.take(*client))),
    };
    // Behind from the start: the head is out and nobody asked for the body.
    let shared = Shared { body: Some(body), behind_since: Some(Instant::now()), unit, whole, stalled: None };
    let shared = Arc::new(parking_lot::Mutex::new(shared));
    let (done, closed) = oneshot::channel();
    tokio::spawn(watchdog(Arc::downgrade(&shared), stall, closed));
    crate::body::boxed_chunks(Metered { shared, hold, _done: done })
}

/// Resets the body of `shared` once it has been behind for its limit with
/// bytes waiting upstream; ends with the body.
async fn watchdog(
    shared: std::sync::Weak<parking_lot::Mutex<Shared>>,
    stall: Duration,
    mut closed: oneshot::Receiver<()>,
) {
    loop {
        let deadline = {
            let Some(shared) = shared.upgrade() else { return };
            let state = shared.lock();
            if state.body.is_none() {
                return;
            }
            match state.behind_since {
                Some(since) => since + state.limit(stall),
                None => Instant::now() + state.limit(stall),
            }
        };
        tokio::select! {
            _ = &mut closed => return,
            _ = tokio::time::sleep_until(deadline) => {}
        }
        let Some(shared) = shared.upgrade() else { return };
        let mut state = shared.lock();
        let Some(since) = state.behind_since else { continue };
        let limit = state.limit(stall);
        if since.elapsed() < limit {
            continue;
        }
        // Behind long enough: cut off only if the upstream has bytes waiting.
        // Polled with a no-op waker: nobody else polls it while behind, and
        // the next poll from downstream registers its own.
        let Some(body) = state.body.as_mut() else { return };
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(body).poll_frame(&mut cx) {
            Poll::Pending => {
                // Nothing waiting: look again a whole limit later.
                state.behind_since = Some(Instant::now());
            }
            Poll::Ready(None) => {
                // Ended while behind: nothing more to hold, and the end
                // goes out when the client reads.
                state.body = None;
                state.unit = None;
                state.whole = None;
                return;
            }
            Poll::Ready(Some(_)) => {
                state.body = None;
                state.unit = None;
                state.whole = None;
                state.stalled = Some(limit);
                counter!(m::PASSTHROUGH_STALLED).increment(1);
                tracing::debug!(?limit, "pass-through answer cut off: its client does not read it");
                return;
            }
        }
    }
}

impl Body for Metered {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let this = self.get_mut();
        let mut state = this.shared.lock();
        if let Some(limit) = state.stalled {
            return Poll::Ready(Some(Err(Box::new(Stalled(limit)))));
        }
        let Some(body) = state.body.as_mut() else { return Poll::Ready(None) };
        let polled = Pin::new(body).poll_frame(cx);
        match &polled {
            Poll::Pending => {
                // Caught up: nothing held for the client now.
                state.behind_since = None;
                state.unit = None;
            }
            Poll::Ready(Some(Ok(_))) => {
                state.behind_since = Some(Instant::now());
                if state.unit.is_none()
                    && let Hold::WhileBehind { budget: Some(budget), client } = &this.hold
                {
                    state.unit = budget.take(*client);
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                state.body = None;
                state.unit = None;
                state.whole = None;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let state = self.shared.lock();
        state.stalled.is_none() && state.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let state = self.shared.lock();
        match (&state.body, state.stalled) {
            (Some(body), _) => body.size_hint(),
            (None, None) => SizeHint::with_exact(0),
            (None, Some(_)) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests;
