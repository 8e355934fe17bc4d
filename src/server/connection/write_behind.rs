//! Write-behind for HTTP/2 connections: one socket write per batch of
//! frames instead of one per frame.
//!
//! The h2 crate writes a DATA frame over 256 bytes on its own and flushes
//! before it takes the next frame, so an event delivered to 1,000 watches on
//! one connection costs 1,000 `writev` calls: the main cost of a large
//! fan-out, and what sets its latency tail. This adapter sits between hyper
//! and the socket: writes are appended to a buffer and reported done at once,
//! flushes return at once, and a task of the connection's own writes out
//! whatever has accumulated, in one call, each time the socket accepts more.
//! Woken by the first frame of a burst, it first lets the tasks already
//! runnable add theirs; while it writes one batch the next accumulates, so a
//! burst goes out in a few large writes.
//!
//! Backpressure is kept: with [`HIGH_WATER`] bytes waiting, writes wait for
//! the writer, as they would wait for the socket. Order is kept: there is one
//! buffer and one writer. A write error is reported on the next write or
//! flush. Shutdown (and drop) writes out what is left before closing.
//!
//! Memory is per connection, so it is bounded per connection: at most two
//! buffers of [`HIGH_WATER`] each while the socket is slower than the
//! frames (the batch being written, the next one filling), and once the
//! connection has been idle for [`IDLE_RELEASE`], no more than [`IDLE_KEEP`].
//! A tier that answers 5,000 kubelets at once holds these buffers 5,000
//! times: with 1 MiB batches kept for good, 500 kubelets' initial state
//! (about 400 KiB each) raised its RSS by 360 KiB a kubelet more than
//! without write-behind, and the allocator kept it after the storm.
//!
//! The reads and the writer task need the IO at the same time. A TCP (or
//! unix) stream splits into halves that share nothing. A TLS stream cannot
//! (one rustls session holds both directions' state), so its halves share a
//! lock ([`TrySplit`]); a half that finds the lock taken returns `Pending`
//! and is woken when the other lets go, instead of blocking its worker
//! thread: with `tokio::io::split`'s mutex, hyper's connection task (which
//! reads the socket on every poll) stopped its worker while the writer
//! encrypted and wrote a batch, and stopped producing the frames that make
//! the next batch.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::Notify;

/// Bytes that may wait for the writer before writes wait too. A batch of
/// this size is still a few dozen small frames in one write, and small enough
/// to hold twice per connection: against 1 MiB, a 500-kubelet storm's peak
/// RSS fell from 449-463 to 287-350 MiB (272 without write-behind), and the
/// CPU per 1,000 deliveries at 10,000 HTTP/2 watchers over TLS went from 6.7
/// to 4.9-6.2 ms (the batch stays in cache while it is encrypted and
/// written). docs/benchmarks.md has the runs.
pub(crate) const HIGH_WATER: usize = 32 << 10;
/// What an idle connection may keep allocated for its next burst.
const IDLE_KEEP: usize = 16 << 10;
/// How long the writer stays idle before it gives back buffers larger than
/// [`IDLE_KEEP`]: longer than the gap between a fan-out's bursts, so a busy
/// connection keeps reusing its buffers instead of faulting in new ones.
const IDLE_RELEASE: Duration = Duration::from_secs(1);
/// How long the writer keeps trying to deliver what is left once the
/// connection is dropped without a shutdown.
const DRAIN_ON_DROP: Duration = Duration::from_secs(5);

#[derive(Default)]
struct State {
    buf: BytesMut,
    /// The last batch's buffer, cleared, for the next swap: two buffers
    /// take turns, so a busy connection neither allocates nor page-faults
    /// a fresh megabyte per batch.
    spare: Option<BytesMut>,
    /// The first write error; every later write and flush reports it.
    error: Option<(io::ErrorKind, String)>,
    /// Set by shutdown or drop: write out the rest, then close.
    closing: bool,
    /// The writer has closed the socket (or given up).
    finished: bool,
    /// A write or shutdown waiting for the writer.
    waiting: Option<Waker>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the writer when there is something to do.
    work: Notify,
}

/// An IO whose writes go through a write-behind buffer; `R` is the read
/// half of the underlying IO.
pub(crate) struct WriteBehind<R> {
    read: R,
    shared: Arc<Shared>,
}

impl<IO> WriteBehind<TryHalf<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    /// Splits `io` (the halves share a lock, as a TLS stream must; neither
    /// waits on it, see [`TrySplit`]) and starts its writer task.
    pub(crate) fn new(io: IO) -> Self {
        let (read, write) = TrySplit::split(io);
        Self::from_halves(read, write)
    }
}

/// One IO shared by a read half and a write half through a lock that is
/// only ever tried: a half that finds it held registers its waker and
/// returns `Pending`; the holder wakes it when it lets go.
struct TrySplit<IO> {
    io: Mutex<IO>,
    is_write_vectored: bool,
    /// The waker of the half (0: read, 1: write) that found the lock held.
    waiting: [Mutex<Option<Waker>>; 2],
}

/// One half of a [`TrySplit`]; `me` is 0 for the read half, 1 for the write half.
pub(crate) struct TryHalf<IO> {
    shared: Arc<TrySplit<IO>>,
    me: usize,
}

impl<IO: AsyncWrite> TrySplit<IO> {
    fn split(io: IO) -> (TryHalf<IO>, TryHalf<IO>) {
        let is_write_vectored = io.is_write_vectored();
        let waiting = [Mutex::new(None), Mutex::new(None)];
        let shared = Arc::new(TrySplit { io: Mutex::new(io), is_write_vectored, waiting });
        (TryHalf { shared: shared.clone(), me: 0 }, TryHalf { shared, me: 1 })
    }
}

impl<IO: Unpin> TryHalf<IO> {
    /// `f` on the IO, or `Pending` (and a wake-up later) if the other half holds it.
    fn with_io<T>(&self, cx: &mut Context<'_>, f: impl FnOnce(Pin<&mut IO>, &mut Context<'_>) -> Poll<T>) -> Poll<T> {
        let shared = &*self.shared;
        let mut io = match shared.io.try_lock() {
            Some(io) => io,
            None => {
                // Registered before trying again: a holder that lets go
                // after this sees the waker; one that let go before left the
                // lock free for the second try.
                *shared.waiting[self.me].lock() = Some(cx.waker().clone());
                match shared.io.try_lock() {
                    Some(io) => {
                        shared.waiting[self.me].lock().take();
                        io
                    }
                    None => return Poll::Pending,
                }
            }
        };
        let out = f(Pin::new(&mut *io), cx);
        drop(io);
        let other = shared.waiting[1 - self.me].lock().take();
        if let Some(w) = other {
            w.wake();
        }
        out
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for TryHalf<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.with_io(cx, |io, cx| io.poll_read(cx, buf))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for TryHalf<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.with_io(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.with_io(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.shared.is_write_vectored
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with_io(cx, |io, cx| io.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with_io(cx, |io, cx| io.poll_shutdown(cx))
    }
}

impl WriteBehind<OwnedReadHalf> {
    /// A TCP stream splits into halves that share no lock: the reader and
    /// the writer task never wait for each other.
    pub(crate) fn tcp(stream: TcpStream) -> Self {
        let (read, write) = stream.into_split();
        Self::from_halves(read, write)
    }
}

impl WriteBehind<tokio::net::unix::OwnedReadHalf> {
    /// A unix stream splits the same way.
    pub(crate) fn unix(stream: tokio::net::UnixStream) -> Self {
        let (read, write) = stream.into_split();
        Self::from_halves(read, write)
    }
}

impl<R> WriteBehind<R> {
    fn from_halves<W: AsyncWrite + Send + 'static>(read: R, write: W) -> Self {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), work: Notify::new() });
        tokio::spawn(writer(write, shared.clone()));
        Self { read, shared }
    }
}

async fn writer<W: AsyncWrite>(write: W, shared: Arc<Shared>) {
    tokio::pin!(write);
    loop {
        let taken = {
            let mut st = shared.state.lock();
            if st.buf.is_empty() {
                if st.closing {
                    break;
                }
                // Nothing to swap: the buffer stays for the next burst (a
                // wake-up whose data an earlier batch took finds it empty).
                None
            } else {
                let next = st.spare.take().unwrap_or_default();
                Some((std::mem::replace(&mut st.buf, next), st.closing))
            }
        };
        let Some((mut batch, closing)) = taken else {
            wait_for_work(&shared).await;
            // Woken by the first frame of a burst: let what is already
            // runnable (the bodies one event woke, the connection task that
            // frames their data) run first, so that the batch holds their
            // frames too. Without this the writer, woken on the other worker
            // the moment the first frame was appended, took about one frame
            // per batch at 10,000 watchers (0.83 writes per delivered event
            // over TLS; 0.07 with it). `yield_now` defers the task until its
            // worker has no other work or reaches its periodic maintenance
            // (every 61 task polls), so a busy runtime still writes.
            tokio::task::yield_now().await;
            continue;
        };
        let result = if closing {
            tokio::time::timeout(DRAIN_ON_DROP, write.write_all(&batch))
                .await
                .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
        } else {
            write.write_all(&batch).await
        };
        let mut st = shared.state.lock();
        if let Err(err) = result {
            st.error = Some((err.kind(), err.to_string()));
            st.buf.clear();
            st.finished = true;
            if let Some(w) = st.waiting.take() {
                w.wake();
            }
            return;
        }
        // Keep the batch's allocation for the next swap, unless a burst
        // made it larger than the buffer is ever allowed to hold.
        if batch.capacity() <= 2 * HIGH_WATER {
            batch.clear();
            st.spare = Some(batch);
        }
        if let Some(w) = st.waiting.take() {
            w.wake();
        }
    }
    let _ = tokio::time::timeout(DRAIN_ON_DROP, write.shutdown()).await;
    let mut st = shared.state.lock();
    st.finished = true;
    if let Some(w) = st.waiting.take() {
        w.wake();
    }
}

/// Waits until there is something to write, giving back large buffers once
/// the connection has been idle for [`IDLE_RELEASE`].
async fn wait_for_work(shared: &Shared) {
    if shared.state.lock().held() <= IDLE_KEEP {
        return shared.work.notified().await;
    }
    if tokio::time::timeout(IDLE_RELEASE, shared.work.notified()).await.is_ok() {
        return;
    }
    {
        let mut st = shared.state.lock();
        // A write that landed as the timeout fired: the caller's next swap takes it.
        if !st.buf.is_empty() {
            return;
        }
        st.buf = BytesMut::new();
        st.spare = None;
    }
    // Any write from here on finds the buffer empty and notifies.
    shared.work.notified().await
}

impl State {
    /// Bytes the buffers hold allocated, whether in use or not.
    fn held(&self) -> usize {
        self.buf.capacity() + self.spare.as_ref().map_or(0, BytesMut::capacity)
    }
}

impl<R> WriteBehind<R> {
    fn check_error(st: &State) -> io::Result<()> {
        match &st.error {
            Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
            None => Ok(()),
        }
    }

    fn append<'b>(
        &self,
        cx: &mut Context<'_>,
        bufs: impl Iterator<Item = &'b [u8]> + Clone,
    ) -> Poll<io::Result<usize>> {
        let mut st = self.shared.state.lock();
        Self::check_error(&st)?;
        if st.closing {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if st.buf.len() >= HIGH_WATER {
            st.waiting = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let was_empty = st.buf.is_empty();
        // Up to the high-water mark and no further (a short write, which
        // hyper and h2 continue), so the buffer's capacity stops at it.
        let n = bufs.clone().map(<[u8]>::len).sum::<usize>().min(HIGH_WATER - st.buf.len());
        st.buf.reserve(n);
        let mut left = n;
        for b in bufs {
            let take = b.len().min(left);
            st.buf.extend_from_slice(&b[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        drop(st);
        if was_empty && n > 0 {
            self.shared.work.notify_one();
        }
        Poll::Ready(Ok(n))
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for WriteBehind<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl<R> AsyncWrite for WriteBehind<R> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.append(cx, std::iter::once(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Called once per frame: no allocation here, only the copy.
        self.append(cx, bufs.iter().map(|b| &**b))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Returns at once: the writer delivers without being asked. (h2 flushes
    /// after every large frame; honouring that is the cost this avoids.)
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Self::check_error(&self.shared.state.lock()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.shared.state.lock();
        if st.finished {
            return Poll::Ready(Self::check_error(&st));
        }
        st.closing = true;
        st.waiting = Some(cx.waker().clone());
        drop(st);
        self.shared.work.notify_one();
        Poll::Pending
    }
}

impl<R> Drop for WriteBehind<R> {
    fn drop(&mut self) {
        self.shared.state.lock().closing = true;
        self.shared.work.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, duplex};

    #[tokio::test]
    async fn bytes_arrive_in_order_and_the_peer_sees_the_close() {
        let (a, mut b) = duplex(64);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut w = WriteBehind::new(a);
        for i in 0..100u8 {
            w.write_all(&[i; 10]).await.unwrap();
            w.flush().await.unwrap();
        }
        w.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        let want: Vec<u8> = (0..100u8).flat_map(|i| [i; 10]).collect();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn writes_wait_when_the_peer_does_not_read() {
        let (a, mut b) = duplex(1024);
        let mut w = WriteBehind::new(a);
        let chunk = vec![7u8; 64 * 1024];
        // One batch in the writer's hands plus HIGH_WATER waiting, never
        // more (a write larger than the room left is taken in part); then
        // writes must wait.
        let mut written = 0;
        let blocked = loop {
            match tokio::time::timeout(Duration::from_millis(200), w.write_all(&chunk)).await {
                Ok(r) => {
                    r.unwrap();
                    written += chunk.len();
                    assert!(written <= 2 * HIGH_WATER, "no backpressure after {written} bytes");
                }
                Err(_) => break true,
            }
        };
        assert!(blocked);
        // Reading drains it and lets writes through again.
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            b.read_to_end(&mut sink).await.unwrap();
            sink.len()
        });
        w.write_all(&chunk).await.unwrap();
        w.shutdown().await.unwrap();
        drop(w);
        let total = reader.await.unwrap();
        assert!(total >= written + chunk.len(), "{total} < {}", written + chunk.len());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_gives_back_its_burst_buffers() {
        let (a, mut b) = duplex(1024);
        let mut w = WriteBehind::new(a);
        let held = |w: &WriteBehind<_>| w.shared.state.lock().held();
        // A burst past the high-water mark to a peer that reads only once
        // the writes have had to wait (paused time moves on when every task
        // waits), so the buffers fill up.
        let burst = 4 * HIGH_WATER;
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let mut got = vec![0u8; burst];
            b.read_exact(&mut got).await.unwrap();
            b
        });
        for _ in 0..burst / 1024 {
            w.write_all(&[1u8; 1024]).await.unwrap();
        }
        let mut b = reader.await.unwrap();
        // Delivered, and the buffers are still there for the next burst ...
        assert!(held(&w) > IDLE_KEEP, "held {} after a burst", held(&w));
        assert!(held(&w) <= 4 * HIGH_WATER, "held {} after a burst", held(&w));
        // ... until the connection has been idle a while.
        tokio::time::sleep(IDLE_RELEASE / 2).await;
        assert!(held(&w) > IDLE_KEEP, "released after {:?} idle", IDLE_RELEASE / 2);
        tokio::time::sleep(IDLE_RELEASE).await;
        assert!(held(&w) <= IDLE_KEEP, "held {} once idle", held(&w));
        // And the connection still works.
        w.write_all(b"after").await.unwrap();
        let mut after = [0u8; 5];
        b.read_exact(&mut after).await.unwrap();
        assert_eq!(&after, b"after");
    }

    #[tokio::test]
    async fn tcp_halves_deliver_in_order_and_read_independently() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let ((server, _), mut client) =
            tokio::join!(async { listener.accept().await.unwrap() }, async { client.await.unwrap() });
        let mut w = WriteBehind::tcp(server);
        for i in 0..200u8 {
            w.write_all(&[i; 100]).await.unwrap();
        }
        // The read half works while writes are pending.
        client.write_all(b"ping").await.unwrap();
        let mut ping = [0u8; 4];
        w.read_exact(&mut ping).await.unwrap();
        assert_eq!(&ping, b"ping");
        drop(w);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let want: Vec<u8> = (0..200u8).flat_map(|i| [i; 100]).collect();
        assert_eq!(got, want);
    }

    struct Count(std::sync::atomic::AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_half_that_finds_the_lock_held_does_not_block_and_is_woken_when_it_is_let_go() {
        let (a, mut b) = duplex(64);
        let (mut read, mut write) = TrySplit::split(a);
        let woken = Arc::new(Count(Default::default()));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut byte = [0u8; 1];
        // The writer holds the IO (as it does while it encrypts and writes a batch).
        let held = write.shared.io.lock();
        assert!(Pin::new(&mut read).poll_read(&mut cx, &mut ReadBuf::new(&mut byte)).is_pending());
        drop(held);
        assert_eq!(woken.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        // Its next operation lets go of the lock and wakes the reader.
        let noop = Waker::noop();
        assert!(Pin::new(&mut write).poll_flush(&mut Context::from_waker(noop)).is_ready());
        assert_eq!(woken.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        b.write_all(b"x").await.unwrap();
        let mut rb = ReadBuf::new(&mut byte);
        assert!(matches!(Pin::new(&mut read).poll_read(&mut cx, &mut rb), Poll::Ready(Ok(()))));
        assert_eq!(rb.filled(), b"x");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shared_io_reads_and_writes_at_once_without_losing_a_wake_up() {
        let (a, b) = duplex(512);
        let (mut peer_read, mut peer_write) = tokio::io::split(b);
        let w = WriteBehind::new(a);
        let (mut r, mut w) = tokio::io::split(w);
        let want: Vec<u8> = (0..20_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let sent = want.clone();
        let writer = tokio::spawn(async move {
            for chunk in sent.chunks(100) {
                w.write_all(chunk).await.unwrap();
            }
            w.shutdown().await.unwrap();
        });
        let echo_in = tokio::spawn(async move {
            for chunk in (0..20_000u32).flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>().chunks(37) {
                peer_write.write_all(chunk).await.unwrap();
            }
            peer_write.shutdown().await.unwrap();
        });
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut got = Vec::new();
        let all = async {
            peer_read.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            echo_in.await.unwrap();
            reading.await.unwrap()
        };
        let read = tokio::time::timeout(Duration::from_secs(20), all).await.expect("no lost wake-up");
        assert_eq!(got, want);
        assert_eq!(read, want);
    }

    /// The writer defers its batch until the runtime has run what was runnable; a runtime that
    /// always has something runnable must still see the bytes written.
    #[tokio::test]
    async fn the_writer_writes_while_the_runtime_never_runs_out_of_work() {
        let (a, mut b) = duplex(1 << 16);
        let mut w = WriteBehind::new(a);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = stop.clone();
        // Always runnable: wakes itself and returns Pending, never deferring.
        let busy = tokio::spawn(std::future::poll_fn(move |cx| {
            if spinning.load(std::sync::atomic::Ordering::Relaxed) {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }));
        w.write_all(b"through a busy runtime").await.unwrap();
        let mut got = [0u8; 22];
        tokio::time::timeout(Duration::from_secs(5), b.read_exact(&mut got)).await.expect("written").unwrap();
        assert_eq!(&got, b"through a busy runtime");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.await.unwrap();
    }

    #[tokio::test]
    async fn a_write_error_is_reported_to_later_writes() {
        let (a, b) = duplex(16);
        drop(b);
        let mut w = WriteBehind::new(a);
        let mut failed = false;
        for _ in 0..100 {
            if w.write_all(b"hello").await.is_err() || w.flush().await.is_err() {
                failed = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(failed, "the broken pipe surfaced");
    }

    #[tokio::test]
    async fn dropping_without_shutdown_still_delivers_what_was_written() {
        let (a, mut b) = duplex(8);
        let mut w = WriteBehind::new(a);
        w.write_all(b"last words").await.unwrap();
        drop(w);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"last words");
    }
}
