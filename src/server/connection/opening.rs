//! The first bytes of a connection: read by the listener itself, under its
//! deadline, then replayed to hyper.
//!
//! HTTP/2 is told from HTTP/1.1 by the 24-byte HTTP/2 preface. Reading it
//! here, not in the server (hyper-util's automatic server reads it with no
//! deadline of its own: a client that connects, or finishes TLS, and then
//! sends nothing, or half a preface, would hold its connection and its
//! `--max-connections` slot for ever), puts it under the same deadline as
//! the TLS handshake and tells the listener which of hyper's servers to run
//! (and whether to put the write-behind under it); [`Rewind`] then hands the
//! bytes to that server as if unread.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// What an HTTP/2 client sends first (RFC 9113 §3.4), prior knowledge or not.
pub(crate) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The bytes a connection opened with: the whole HTTP/2 preface, or as much
/// of it as matched plus the first byte that did not (with what came in the
/// same read), or less at end of file.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Opening {
    buf: [u8; H2_PREFACE.len()],
    len: usize,
}

impl Opening {
    /// True when the client sent the whole HTTP/2 preface.
    pub(crate) fn is_h2_preface(&self) -> bool {
        self.buf[..self.len] == H2_PREFACE[..]
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Reads until the opening is known: the full preface, the first byte that
/// differs from it, or end of file. Waits as long as the client keeps to the
/// preface; the caller bounds that with its deadline.
pub(crate) async fn read_opening<IO: AsyncRead + Unpin>(io: &mut IO) -> io::Result<Opening> {
    let mut opening = Opening::default();
    while opening.len < H2_PREFACE.len() {
        let n = io.read(&mut opening.buf[opening.len..]).await?;
        if n == 0 {
            break;
        }
        let start = opening.len;
        opening.len += n;
        if opening.buf[start..opening.len] != H2_PREFACE[start..opening.len] {
            break;
        }
    }
    Ok(opening)
}

/// What a [`Rewind`] hands back before reading on.
enum Prefix {
    /// The connection's opening, read by the listener.
    Opening(Opening),
    /// A request head (and whatever came with it) read by the HTTP/1.1 front
    /// (see `super::listener::h1_front`), for hyper to read again. Freed once read.
    Read(Vec<u8>),
}

impl Prefix {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Opening(opening) => opening.as_bytes(),
            Self::Read(bytes) => bytes,
        }
    }
}

/// An IO whose reads yield bytes already read from `io` (the connection's
/// opening, or a request head the HTTP/1.1 front read) before anything else
/// from `io`; writes go straight to `io`.
///
/// The read that hands back the end of those bytes goes on to read from `io`
/// into the rest of the buffer, if `io` has bytes ready: a request head
/// arrives in one read, as it came from the client, not in the opening's 24
/// bytes and then the rest. hyper's HTTP/1.1 server reads the head into an
/// 8 KiB buffer and, when a read leaves it less than 8 KiB free, doubles it,
/// so a split head cost every connection a 16 KiB read buffer.
pub(crate) struct Rewind<IO> {
    prefix: Prefix,
    /// How much of `prefix` has been read back.
    pos: usize,
    /// An error `io` returned in the read that also handed back the prefix's
    /// end: the next read returns it.
    error: Option<io::Error>,
    io: IO,
}

impl<IO> Rewind<IO> {
    pub(crate) fn new(io: IO, opening: Opening) -> Self {
        Self { prefix: Prefix::Opening(opening), pos: 0, error: None, io }
    }

    /// True when the connection opened with the whole HTTP/2 preface.
    pub(crate) fn is_h2_preface(&self) -> bool {
        matches!(&self.prefix, Prefix::Opening(opening) if opening.is_h2_preface())
    }

    /// The same connection, whose reads yield `read` first (bytes read
    /// through this one), then what this one had not yet handed back, then
    /// `io`: nothing read is lost, whoever reads next.
    pub(crate) fn replaying(self, mut read: Vec<u8>) -> Self {
        read.extend_from_slice(&self.prefix.as_bytes()[self.pos..]);
        Self { prefix: Prefix::Read(read), pos: 0, error: self.error, io: self.io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewind<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(err) = this.error.take() {
            return Poll::Ready(Err(err));
        }
        let rest = &this.prefix.as_bytes()[this.pos..];
        if rest.is_empty() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        this.pos += n;
        if this.pos == this.prefix.as_bytes().len() {
            if let Prefix::Read(bytes) = &mut this.prefix {
                // Not kept for the connection's life.
                *bytes = Vec::new();
                this.pos = 0;
            }
            if buf.remaining() > 0 {
                // Pending (the waker is then registered; a wake-up after this
                // read returned is a spurious one) and end of file (the next
                // read sees it again) both leave the prefix as this read's
                // bytes.
                if let Poll::Ready(Err(err)) = Pin::new(&mut this.io).poll_read(cx, buf) {
                    this.error = Some(err);
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Rewind<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncWriteExt, duplex};

    /// Reads the opening `sent` makes, then everything after it through a
    /// [`Rewind`]: the bytes come back whole and in order.
    async fn open_and_replay(sent: &[&[u8]]) -> (Opening, Vec<u8>) {
        let (mut client, mut server) = duplex(1024);
        for piece in sent {
            client.write_all(piece).await.unwrap();
        }
        drop(client);
        let opening = read_opening(&mut server).await.unwrap();
        let mut replayed = Vec::new();
        Rewind::new(server, opening).read_to_end(&mut replayed).await.unwrap();
        assert_eq!(replayed, sent.concat(), "the replay lost or reordered bytes");
        (opening, replayed)
    }

    #[tokio::test]
    async fn an_h2_preface_is_recognised_and_replayed() {
        let (opening, _) = open_and_replay(&[H2_PREFACE, b"\0\0\0\x04\0\0\0\0\0"]).await;
        assert!(opening.is_h2_preface());
        assert_eq!(opening.as_bytes(), H2_PREFACE);
    }

    #[tokio::test]
    async fn an_http1_request_stops_at_the_first_read() {
        let (opening, _) = open_and_replay(&[b"GET /api HTTP/1.1\r\nHost: a\r\n\r\n"]).await;
        assert!(!opening.is_h2_preface());
        // One read of up to the preface's length, not the whole head.
        assert_eq!(opening.as_bytes(), b"GET /api HTTP/1.1\r\nHost:");
    }

    #[tokio::test]
    async fn a_mismatch_after_a_matching_start_is_http1() {
        let (opening, _) = open_and_replay(&[b"PRI * HT", b"TP/1.1\r\n\r\n"]).await;
        assert!(!opening.is_h2_preface());
        assert_eq!(opening.as_bytes(), b"PRI * HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    async fn end_of_file_ends_the_opening() {
        let (opening, _) = open_and_replay(&[b"PRI"]).await;
        assert!(!opening.is_h2_preface());
        let (opening, _) = open_and_replay(&[]).await;
        assert!(opening.as_bytes().is_empty());
    }

    /// A client that stops inside the preface leaves the read waiting: the
    /// listener's deadline is what ends it.
    #[tokio::test(start_paused = true)]
    async fn a_partial_preface_waits_for_more() {
        let (mut client, mut server) = duplex(1024);
        client.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        let read = read_opening(&mut server);
        tokio::pin!(read);
        let early = tokio::time::timeout(Duration::from_secs(3600), &mut read).await;
        assert!(early.is_err(), "the opening ended before the preface did: {early:?}");
        // The rest of the preface, in a later piece, completes it.
        client.write_all(b"\r\nSM\r\n\r\n").await.unwrap();
        let opening = tokio::time::timeout(Duration::from_secs(1), read).await.unwrap().unwrap();
        assert!(opening.is_h2_preface());
    }

    /// The read that ends the opening also takes what the client sent after
    /// it, so a request head comes back in one read.
    #[tokio::test]
    async fn the_opening_and_what_follows_come_back_in_one_read() {
        let head = b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: a\r\nAccept: application/json\r\n\r\n";
        let (mut client, mut server) = duplex(1024);
        client.write_all(head).await.unwrap();
        let opening = read_opening(&mut server).await.unwrap();
        assert_eq!(opening.as_bytes().len(), H2_PREFACE.len());
        let mut io = Rewind::new(server, opening);
        let mut buf = [0u8; 512];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &head[..], "the head came back in more than one read");
        // Nothing more is waiting: the next read waits for the client.
        client.write_all(b"next").await.unwrap();
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"next");
    }

    /// An IO that has nothing ready after the opening leaves the read with
    /// the opening alone; an error after it is returned by the next read, not
    /// lost.
    #[tokio::test]
    async fn an_error_after_the_opening_is_returned_by_the_next_read() {
        struct Failing;
        impl AsyncRead for Failing {
            fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset")))
            }
        }
        let opening = read_opening(&mut &b"GET / HTTP/1.1\r\n"[..]).await.unwrap();
        let mut io = Rewind::new(Failing, opening);
        let mut buf = [0u8; 64];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n");
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);

        let (_client, server) = duplex(64);
        let mut io = Rewind::new(server, opening);
        let read = tokio::time::timeout(Duration::from_secs(5), io.read(&mut buf)).await;
        assert_eq!(read.expect("the opening waited for more").unwrap(), opening.as_bytes().len());
    }

    #[tokio::test]
    async fn rewind_replays_into_small_buffers_and_writes_through() {
        let (mut client, mut server) = duplex(1024);
        client.write_all(H2_PREFACE).await.unwrap();
        client.write_all(b"after").await.unwrap();
        let opening = read_opening(&mut server).await.unwrap();
        let mut io = Rewind::new(server, opening);
        let mut got = Vec::new();
        let mut small = [0u8; 5];
        while got.len() < H2_PREFACE.len() + 5 {
            let n = io.read(&mut small).await.unwrap();
            assert!(n > 0 && n <= 5);
            got.extend_from_slice(&small[..n]);
        }
        assert_eq!(&got[..24], H2_PREFACE);
        assert_eq!(&got[24..], b"after");
        io.write_all(b"reply").await.unwrap();
        io.shutdown().await.unwrap();
        let mut reply = Vec::new();
        client.read_to_end(&mut reply).await.unwrap();
        assert_eq!(reply, b"reply");
    }
}
