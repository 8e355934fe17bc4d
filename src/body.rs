//! The one response and request body type the proxy speaks, and the wrapper
//! that ends long-lived streams at shutdown.
//!
//! Every body crossing watchmux is boxed into [`ProxyBody`] so that streamed
//! upstream bodies, bodies watchmux writes itself and cache-built watch
//! streams share one type and one error type. Its data is a [`Chunk`], so a
//! watch event can carry shared bytes without copying them.

mod chunk;

pub use chunk::Chunk;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The error of every body: whatever the upstream connection or a stream reports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response that ends a request before its real work (a 401, 403, 413,
/// 429), boxed so the `Result`s that carry it stay small.
pub type Refusal = Box<http::Response<ProxyBody>>;

/// The body type of every request and response watchmux forwards or writes.
pub type ProxyBody = BoxBody<Chunk, BoxError>;

/// A complete body from bytes watchmux produced itself.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(Chunk::from(bytes.into())).map_err(|never| match never {}).boxed()
}

/// A body with no bytes.
pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// A complete body of one [`Chunk`], its parts written as they are.
pub fn chunk(chunk: Chunk) -> ProxyBody {
    Full::new(chunk).map_err(|never| match never {}).boxed()
}

/// Boxes any body of plain bytes whose error converts into [`BoxError`].
pub fn boxed<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_frame(|frame| frame.map_data(Chunk::from)).map_err(Into::into).boxed()
}

/// Boxes a body that already yields [`Chunk`]s.
pub fn boxed_chunks<B>(body: B) -> ProxyBody
where
    B: Body<Data = Chunk> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}

/// `body`, holding `held` (a permit, a guard) until the body is dropped:
/// what an answer keeps counted until it has been sent, not only until its
/// head was.
pub fn holding<G: Send + Sync + 'static>(body: ProxyBody, held: G) -> ProxyBody {
    boxed_chunks(Holding { inner: body, _held: held })
}

/// [`holding`], but for `limit` at most: past it `held` is given back even
/// if the body is still unsent (a client that never reads it). A timer task
/// per body, ended with the body.
pub fn holding_at_most<G: Send + Sync + 'static>(body: ProxyBody, held: G, limit: std::time::Duration) -> ProxyBody {
    let slot = std::sync::Arc::new(parking_lot::Mutex::new(Some(held)));
    let weak = std::sync::Arc::downgrade(&slot);
    let timer = tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        if let Some(slot) = weak.upgrade() {
            slot.lock().take();
        }
    });
    holding(body, HeldUntil { _slot: slot, timer: timer.abort_handle() })
}

/// What [`holding_at_most`] keeps with the body: the held value (gone once
/// the timer fired) and the timer, stopped when the body goes.
struct HeldUntil<G> {
    _slot: std::sync::Arc<parking_lot::Mutex<Option<G>>>,
    timer: tokio::task::AbortHandle,
}

impl<G> Drop for HeldUntil<G> {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

pin_project_lite::pin_project! {
    /// See [`holding`].
    struct Holding<G> {
        #[pin]
        inner: ProxyBody,
        _held: G,
    }
}

impl<G> Body for Holding<G> {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body of chunks known in advance, with its exact length (so HTTP/1.1
/// sends a Content-Length instead of chunked encoding).
pub struct ChunkList {
    chunks: std::collections::VecDeque<Chunk>,
    remaining: u64,
}

impl ChunkList {
    /// The body of these chunks, in order.
    pub fn new(chunks: std::collections::VecDeque<Chunk>) -> Self {
        use bytes::Buf;
        let remaining = chunks.iter().map(|c| c.remaining() as u64).sum();
        Self { chunks, remaining }
    }
}

impl Body for ChunkList {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        use bytes::Buf;
        Poll::Ready(self.chunks.pop_front().map(|c| {
            self.remaining -= c.remaining() as u64;
            Ok(Frame::data(c))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A request's body as the handler gets it: hyper's, or none at all for a
/// request whose head watchmux read itself (see `server::connection::listener::h1_front`: only
/// requests without a body are read there).
pub enum RequestBody {
    /// The body of a request hyper read.
    Hyper(hyper::body::Incoming),
    /// No body: the request had none.
    Empty,
}

impl From<hyper::body::Incoming> for RequestBody {
    fn from(incoming: hyper::body::Incoming) -> Self {
        Self::Hyper(incoming)
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            Self::Hyper(incoming) => Pin::new(incoming).poll_frame(cx),
            Self::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Hyper(incoming) => incoming.is_end_stream(),
            Self::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Hyper(incoming) => incoming.size_hint(),
            Self::Empty => SizeHint::with_exact(0),
        }
    }
}

/// A watch younger than this that has sent nothing is not ended at once by a
/// stop: client-go's reflector takes a watch that ends within a second with
/// no event (bookmarks count) for a failure (`handleWatch`'s "very short
/// watch") and lists again. The cache's watch streams linger the same way.
pub const VERY_SHORT_WATCH: std::time::Duration = std::time::Duration::from_secs(1);

pin_project_lite::pin_project! {
    /// A body that ends cleanly (end of stream, not an error) once `stop` is
    /// cancelled.
    ///
    /// Watch streams never finish on their own, so a graceful shutdown that
    /// waited for them would always run into its deadline. Ending the body
    /// instead finishes the chunked response normally; clients see the same
    /// thing as a watch timeout and reconnect, to another replica or to this
    /// one after restart, from their last resourceVersion.
    ///
    /// A stream stopped before it sent anything, younger than
    /// [`VERY_SHORT_WATCH`], ends at that age instead (delivering what
    /// arrives meanwhile), as the cache's own watches do: a watch made just
    /// before a replica's SIGTERM would otherwise cost its client a relist.
    pub struct EndOnShutdown<B> {
        #[pin]
        inner: B,
        #[pin]
        stop: WaitForCancellationFutureOwned,
        stopped: bool,
        started: tokio::time::Instant,
        sent_any: bool,
        linger: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<B> EndOnShutdown<B> {
    /// `inner`, ended when `stop` is cancelled.
    pub fn new(inner: B, stop: CancellationToken) -> Self {
        Self {
            inner,
            stop: stop.cancelled_owned(),
            stopped: false,
            started: tokio::time::Instant::now(),
            sent_any: false,
            linger: None,
        }
    }
}

impl<B: Body> Body for EndOnShutdown<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        if *this.stopped {
            return Poll::Ready(None);
        }
        // Data already available is delivered before the stop is honoured, so
        // an event the upstream sent before shutdown still reaches the client.
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            if matches!(&frame, Some(Ok(f)) if f.is_data()) {
                *this.sent_any = true;
            }
            return Poll::Ready(frame);
        }
        if this.linger.is_none() && this.stop.poll(cx).is_ready() {
            let until = *this.started + VERY_SHORT_WATCH;
            if *this.sent_any || tokio::time::Instant::now() >= until {
                *this.stopped = true;
                return Poll::Ready(None);
            }
            *this.linger = Some(Box::pin(tokio::time::sleep_until(until)));
        }
        if let Some(linger) = this.linger {
            // Stopped while young and quiet: a frame that arrives meanwhile
            // is delivered (and the next poll ends the stream).
            if *this.sent_any || linger.as_mut().poll(cx).is_ready() {
                *this.stopped = true;
                return Poll::Ready(None);
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.stopped || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.stopped { SizeHint::with_exact(0) } else { self.inner.size_hint() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::channel::Channel;

    #[tokio::test]
    async fn body_ends_cleanly_when_shutdown_is_signalled() {
        let (mut tx, rx) = Channel::<Bytes, BoxError>::new(4);
        let stop = CancellationToken::new();
        let mut body = std::pin::pin!(EndOnShutdown::new(rx, stop.clone()));

        tx.send_data(Bytes::from_static(b"event\n")).await.unwrap();
        let first = body.as_mut().frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "event\n");

        stop.cancel();
        assert!(body.as_mut().frame().await.is_none(), "stream must end, not error, after shutdown");
        assert!(body.is_end_stream());
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_young_quiet_stream_ends_at_its_first_second_not_at_once() {
        let (tx, rx) = Channel::<Bytes, BoxError>::new(4);
        let stop = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let mut body = std::pin::pin!(EndOnShutdown::new(rx, stop.clone()));
        tokio::time::advance(std::time::Duration::from_millis(300)).await;
        stop.cancel();
        // Not a very short watch for client-go: it ends at 1 s, not at 0.3.
        assert!(body.as_mut().frame().await.is_none());
        assert_eq!(start.elapsed(), VERY_SHORT_WATCH);
        assert!(body.is_end_stream());
        drop(tx);

        // An event that arrives during the linger is delivered, then the stream ends.
        let (mut tx, rx) = Channel::<Bytes, BoxError>::new(4);
        let stop = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let mut body = std::pin::pin!(EndOnShutdown::new(rx, stop.clone()));
        stop.cancel();
        let send = async {
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            tx.send_data(Bytes::from_static(b"late\n")).await.unwrap();
        };
        let mut reading = body.as_mut();
        let (frame, ()) = tokio::join!(reading.frame(), send);
        assert_eq!(frame.unwrap().unwrap().into_data().unwrap(), "late\n");
        assert!(body.as_mut().frame().await.is_none());
        assert_eq!(start.elapsed(), std::time::Duration::from_millis(400), "ended after its event, not at 1 s");

        // A stream already a second old, quiet or not, ends at once.
        let (_tx, rx) = Channel::<Bytes, BoxError>::new(4);
        let stop = CancellationToken::new();
        let mut body = std::pin::pin!(EndOnShutdown::new(rx, stop.clone()));
        tokio::time::advance(VERY_SHORT_WATCH).await;
        let at = tokio::time::Instant::now();
        stop.cancel();
        assert!(body.as_mut().frame().await.is_none());
        assert_eq!(at.elapsed(), std::time::Duration::ZERO);
    }

    #[tokio::test]
    async fn data_sent_before_shutdown_is_still_delivered() {
        let (mut tx, rx) = Channel::<Bytes, BoxError>::new(4);
        let stop = CancellationToken::new();
        let mut body = std::pin::pin!(EndOnShutdown::new(rx, stop.clone()));
        tx.send_data(Bytes::from_static(b"last\n")).await.unwrap();
        stop.cancel();
        let frame = body.as_mut().frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "last\n");
        assert!(body.as_mut().frame().await.is_none());
    }
}
