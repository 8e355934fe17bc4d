//! The server side of an accepted TLS connection, over rustls's unbuffered
//! API: buffers exist only while bytes are in flight.
//!
//! tokio-rustls's stream keeps a rustls `ServerConnection`, whose receive
//! buffer is sized for the next read before every read and never below
//! 4 KiB, for the connection's life: on an idle HTTP/1.1 watcher over TLS
//! (its socket read only to see the client go) that buffer was a third of
//! what the watcher cost (docs/benchmarks.md, Memory per idle HTTP/1.1
//! watcher). Here the stream owns its three buffers: ciphertext read and not
//! yet taken by rustls, plaintext decrypted and not yet read, ciphertext
//! encrypted and not yet written. Each is freed once empty: the read ones
//! when the socket has nothing more, the written one when the socket has
//! taken it all.
//!
//! rustls still does all of TLS (record parsing, the handshake, keys, key
//! updates, alerts); this module moves bytes between it and the socket. What
//! it keeps from tokio-rustls's behaviour: a fatal error sends rustls's alert
//! before it is reported, a TCP end without `close_notify` is an
//! `UnexpectedEof` error, `close_notify` is sent on shutdown, and a read sends
//! what rustls has to answer (a TLS 1.3 key update) on its way.
//!
//! What it takes from Go's HTTPS server (kube-apiserver's) instead: the first
//! record's header is judged before rustls sees it ([`go_opening_refusal`]),
//! so that a client speaking plain HTTP to the TLS port gets Go's `400`
//! ("Client sent an HTTP request to an HTTPS server."), and other openings
//! that are not TLS get what Go gives them (nothing, or Go's alert).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::{CommonState, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A TLS record's header: content type, version, length.
const RECORD_HEADER: usize = 5;
/// The most plaintext a record carries.
const MAX_PLAINTEXT: usize = 16_384;
/// A read asks the socket for at least this much, as rustls's own buffer
/// does.
const READ_SIZE: usize = 4096;
/// The largest TLS record on the wire: a 16 KiB fragment, 2 KiB of
/// expansion allowed by the protocol, the 5-byte header.
const MAX_RECORD: usize = MAX_PLAINTEXT + 2_048 + RECORD_HEADER;
/// Ciphertext the stream holds unprocessed before it gives up on the peer:
/// rustls joins a handshake message of up to 64 KiB (a client's certificate
/// chain) in the caller's buffer, plus the record being read. rustls's
/// buffered connection has the same limit.
const MAX_INCOMING: usize = 0xffff + MAX_RECORD;
/// Plaintext encrypted at one write, and ciphertext waiting for the socket
/// before writes wait too (backpressure, as a socket's send buffer gives).
const WRITE_CHUNK: usize = 64 << 10;
/// The first room offered for a handshake record (rustls asks for more when
/// one is larger, a certificate chain).
const HANDSHAKE_ROOM: usize = 2048;

/// An accepted TLS connection on `IO`, its handshake done.
pub(crate) struct TlsServerStream<IO> {
    io: IO,
    conn: UnbufferedServerConnection,
    /// Ciphertext read, not yet taken by rustls: `incoming[..received]`.
    incoming: Vec<u8>,
    received: usize,
    /// Plaintext decrypted, not yet read: `plaintext[taken..]`.
    plaintext: Vec<u8>,
    taken: usize,
    /// Ciphertext not yet written: `outgoing[sent..]`.
    outgoing: Vec<u8>,
    sent: usize,
    /// The peer's `close_notify` arrived: reads end once the plaintext
    /// before it is read.
    peer_closed: bool,
    /// The socket ended (a read of zero bytes).
    eof: bool,
    /// Our `close_notify` is in `outgoing` (or sent).
    close_queued: bool,
    /// The first fatal error, reported again by every later call.
    failed: Option<(io::ErrorKind, String)>,
    /// The first record's header has been judged ([`go_opening_refusal`]).
    opening_judged: bool,
}

/// Where rustls stands once it has taken what it can of the ciphertext read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// It needs more bytes from the peer (the handshake is not done).
    Read,
    /// The handshake is done: application data may be written.
    Traffic,
    /// Both sides sent `close_notify`.
    Closed,
}

/// What [`TlsServerStream::process`] does on reaching the traffic state.
#[derive(Clone, Copy)]
enum ToSend<'a> {
    Nothing,
    /// Encrypt this plaintext (at most [`WRITE_CHUNK`]) into `outgoing`.
    Data(&'a [u8]),
    /// Queue our `close_notify`.
    CloseNotify,
}

impl<IO> TlsServerStream<IO> {
    /// The TLS session: ALPN, the client's certificates, the version.
    pub(crate) fn session(&self) -> &CommonState {
        &self.conn
    }

    /// Bytes allocated for the three buffers (for tests and accounting).
    #[cfg(test)]
    fn buffered_capacity(&self) -> usize {
        self.incoming.capacity() + self.plaintext.capacity() + self.outgoing.capacity()
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsServerStream<IO> {
    /// Runs the server side of a handshake on `io` with `config`; the stream
    /// is returned once the handshake is complete: the client's Finished
    /// read and verified, so its certificate, if any, is known.
    pub(crate) async fn accept(config: Arc<ServerConfig>, io: IO) -> io::Result<Self> {
        let conn = UnbufferedServerConnection::new(config).map_err(invalid_data)?;
        let mut stream = Self {
            io,
            conn,
            incoming: Vec::new(),
            received: 0,
            plaintext: Vec::new(),
            taken: 0,
            outgoing: Vec::new(),
            sent: 0,
            peer_closed: false,
            eof: false,
            close_queued: false,
            failed: None,
            opening_judged: false,
        };
        std::future::poll_fn(|cx| stream.poll_handshake(cx)).await?;
        Ok(stream)
    }

    /// Our flights are written as far as the socket takes them, not waited
    /// for before reading; the last one (the server's TLS 1.2 Finished, TLS
    /// 1.3 tickets) is written whole before the stream is handed over, as
    /// tokio-rustls does.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.opening_judged {
                // rustls sees nothing before the first record is judged: it
                // would refuse a bad first byte, or a record over the
                // plaintext limit, with an alert where Go waits for the five
                // bytes, or the record (and closes without a word on an
                // early end).
                if self.received < go_judges_after(&self.incoming[..self.received]) {
                    if self.eof {
                        return Poll::Ready(Err(handshake_eof()));
                    }
                    ready!(self.poll_read_io(cx))?;
                    continue;
                }
                self.opening_judged = true;
                if let Some((answer, reason)) = go_opening_refusal(&self.incoming[..RECORD_HEADER]) {
                    self.outgoing.extend_from_slice(&answer);
                    let err = self.fail(invalid_data(reason));
                    // Written if the socket takes it now, as an alert is.
                    let _ = self.poll_send(cx);
                    return Poll::Ready(Err(err));
                }
            }
            let next = self.process_or_alert(cx, ToSend::Nothing)?;
            if let Poll::Ready(Err(err)) = self.poll_send(cx) {
                return Poll::Ready(Err(err));
            }
            match next {
                Next::Traffic => {
                    ready!(self.poll_send(cx))?;
                    return Poll::Ready(Ok(()));
                }
                Next::Closed => return Poll::Ready(Err(handshake_eof())),
                Next::Read if self.peer_closed || self.eof => return Poll::Ready(Err(handshake_eof())),
                Next::Read => {
                    ready!(self.poll_read_io(cx))?;
                }
            }
        }
    }

    /// Hands rustls the ciphertext read so far and does what it asks until
    /// it needs the socket: handshake messages and alerts are encoded into
    /// `outgoing`, application data is appended to `plaintext`, and at the
    /// traffic state `send` is encrypted into `outgoing`.
    fn process(&mut self, send: ToSend<'_>) -> io::Result<Next> {
        if let Some((kind, message)) = &self.failed {
            return Err(io::Error::new(*kind, message.clone()));
        }
        loop {
            let UnbufferedStatus { mut discard, state } =
                self.conn.process_tls_records(&mut self.incoming[..self.received]);
            // `Some` ends the loop; `None` goes round again.
            let step: Result<Option<Next>, io::Error> = match state {
                Err(err) => Err(invalid_data(err)),
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    let mut result = Ok(None);
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(record) => {
                                discard += record.discard;
                                self.plaintext.extend_from_slice(record.payload);
                            }
                            Err(err) => {
                                result = Err(invalid_data(err));
                                break;
                            }
                        }
                    }
                    result
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    encode_into(&mut self.outgoing, HANDSHAKE_ROOM, |out| encoded(encode.encode(out))).map(|()| None)
                }
                // What was encoded is in `outgoing`, which goes out in order
                // before anything encoded after it: as good as sent.
                Ok(ConnectionState::TransmitTlsData(transmit)) => {
                    transmit.done();
                    Ok(None)
                }
                Ok(ConnectionState::BlockedHandshake) => Ok(Some(Next::Read)),
                Ok(ConnectionState::PeerClosed) => {
                    self.peer_closed = true;
                    Ok(None)
                }
                Ok(ConnectionState::Closed) => Ok(Some(Next::Closed)),
                Ok(ConnectionState::WriteTraffic(mut traffic)) => {
                    let sent = match send {
                        ToSend::Nothing => Ok(()),
                        ToSend::Data(data) => encode_into(&mut self.outgoing, sealed_size(data.len()), |out| {
                            encrypted(traffic.encrypt(data, out))
                        }),
                        ToSend::CloseNotify => encode_into(&mut self.outgoing, sealed_size(2), |out| {
                            encrypted(traffic.queue_close_notify(out))
                        }),
                    };
                    // Traffic states also come while a TLS 1.3 server waits
                    // for the client's Finished (it may send first): the
                    // handshake is done only when rustls says so, below.
                    sent.map(|()| Some(Next::Traffic))
                }
                // Early data is never enabled; any other state is one this
                // module does not know.
                Ok(other) => Err(invalid_data(format!("unexpected TLS state {other:?}"))),
            };
            self.discard(discard);
            match step {
                Ok(None) => continue,
                Ok(Some(Next::Traffic)) if self.conn.is_handshaking() => return Ok(Next::Read),
                Ok(Some(next)) => return Ok(next),
                Err(err) => return Err(self.fail(err)),
            }
        }
    }

    /// [`Self::process`], and on a fatal error the alert rustls queued for
    /// it written if the socket takes it now (not waited for: the error is
    /// what the caller must see).
    fn process_or_alert(&mut self, cx: &mut Context<'_>, send: ToSend<'_>) -> io::Result<Next> {
        let first_failure = self.failed.is_none();
        let result = self.process(send);
        if result.is_err() && first_failure {
            self.queue_alert();
            let _ = self.poll_send(cx);
        }
        result
    }

    /// After a fatal error rustls hands out its alert as one more record to
    /// encode, before it looks at the ciphertext again (which it must be
    /// given as before: it keeps offsets into it while it joins a handshake
    /// message). Asked once only: asked again, it would read the bad record
    /// again and fail a second time.
    fn queue_alert(&mut self) {
        if let Ok(ConnectionState::EncodeTlsData(mut encode)) =
            self.conn.process_tls_records(&mut self.incoming[..self.received]).state
        {
            let _ = encode_into(&mut self.outgoing, HANDSHAKE_ROOM, |out| encoded(encode.encode(out)));
        }
    }

    fn discard(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.incoming.copy_within(n..self.received, 0);
        self.received -= n;
    }

    fn fail(&mut self, err: io::Error) -> io::Error {
        self.failed = Some((err.kind(), err.to_string()));
        err
    }

    /// Reads once from the socket into `incoming`: at least [`READ_SIZE`],
    /// or the rest of the record at its front. Ready(0) at the socket's end.
    /// On `Pending` with nothing left unprocessed, the buffer is freed: an
    /// idle connection holds none.
    fn poll_read_io(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let want = READ_SIZE.max(self.front_record_rest());
        if self.received + want > MAX_INCOMING {
            return Poll::Ready(Err(self.fail(invalid_data("TLS message buffer full"))));
        }
        if self.incoming.len() < self.received + want {
            self.incoming.resize(self.received + want, 0);
        }
        let mut buf = ReadBuf::new(&mut self.incoming[self.received..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                self.received += n;
                if n == 0 {
                    self.eof = true;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => {
                if self.received == 0 {
                    self.incoming = Vec::new();
                }
                Poll::Pending
            }
        }
    }

    /// The bytes still missing from the record whose header starts
    /// `incoming` (0 if none is there): a large record is read in one go.
    fn front_record_rest(&self) -> usize {
        if self.received < RECORD_HEADER {
            return 0;
        }
        let len = RECORD_HEADER + usize::from(u16::from_be_bytes([self.incoming[3], self.incoming[4]]));
        len.min(MAX_RECORD).saturating_sub(self.received)
    }

    /// Writes `outgoing` until the socket has all of it, then frees it.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.outgoing.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.outgoing[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.outgoing = Vec::new();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Encrypts `data` (at most [`WRITE_CHUNK`] of it), first waiting for
    /// the socket while [`WRITE_CHUNK`] or more is still unwritten. Returns
    /// the plaintext taken: all of `data`'s first chunk, or `Pending` before
    /// any of it is.
    fn poll_write_plain(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if self.outgoing.len() - self.sent >= WRITE_CHUNK {
            match self.poll_send(cx) {
                Poll::Ready(result) => result?,
                Poll::Pending if self.outgoing.len() - self.sent >= WRITE_CHUNK => return Poll::Pending,
                Poll::Pending => {}
            }
        }
        if self.close_queued {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "TLS stream shut down")));
        }
        let data = &data[..data.len().min(WRITE_CHUNK)];
        match self.process_or_alert(cx, ToSend::Data(data))? {
            Next::Traffic => {}
            Next::Read => return Poll::Ready(Err(invalid_data("TLS handshake not complete"))),
            Next::Closed => return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "TLS session closed"))),
        }
        // Written now if the socket takes it; else by the next write or flush.
        if let Poll::Ready(Err(err)) = self.poll_send(cx) {
            return Poll::Ready(Err(err));
        }
        Poll::Ready(Ok(data.len()))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsServerStream<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.taken < this.plaintext.len() {
                let n = buf.remaining().min(this.plaintext.len() - this.taken);
                buf.put_slice(&this.plaintext[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.plaintext.len() {
                    this.plaintext = Vec::new();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            let next = this.process_or_alert(cx, ToSend::Nothing)?;
            // What rustls had to say back (a key update's answer) goes out
            // now if the socket takes it, else with the next write or flush.
            if let Poll::Ready(Err(err)) = this.poll_send(cx) {
                return Poll::Ready(Err(err));
            }
            if this.taken < this.plaintext.len() || this.peer_closed {
                continue;
            }
            if next == Next::Closed {
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed connection without sending TLS close_notify",
                )));
            }
            ready!(this.poll_read_io(cx))?;
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsServerStream<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_plain(cx, buf)
    }

    /// Small slices (an HTTP/1.1 chunk's size line, the event, its CRLF) go
    /// into one record, not a record each: gathered, up to [`WRITE_CHUNK`].
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut non_empty = bufs.iter().filter(|b| !b.is_empty());
        match (non_empty.next(), non_empty.next()) {
            (None, _) => return Poll::Ready(Ok(0)),
            (Some(only), None) => return this.poll_write_plain(cx, only),
            _ => {}
        }
        let mut gathered = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum::<usize>().min(WRITE_CHUNK));
        for buf in bufs {
            let room = WRITE_CHUNK - gathered.len();
            gathered.extend_from_slice(&buf[..buf.len().min(room)]);
            if gathered.len() == WRITE_CHUNK {
                break;
            }
        }
        this.poll_write_plain(cx, &gathered)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_queued && this.failed.is_none() {
            this.close_queued = true;
            // A session that cannot say goodbye is still shut below.
            let _ = this.process(ToSend::CloseNotify);
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// What Go's HTTPS server does, before any TLS, with a connection whose first
/// record header is `header`, where that is not to go on to a handshake: the
/// bytes it writes before it closes (perhaps none) and why.
///
/// Go's `crypto/tls` reads the header first and refuses, in this order: an
/// SSLv2 hello (type 0x80) with a `protocol_version` alert; a first record
/// that is neither a handshake nor an alert, or claims a version from 16.0
/// up, with no alert at all, and `net/http` then answers plain text if the
/// five bytes are one of its HTTP request starts; a record longer than TLS
/// allows with a `record_overflow` alert, and so, once it is read whole,
/// one whose plaintext passes 16 KiB. Its alerts before a version is
/// chosen carry record version 3.1 (TLS 1.0). Anything else goes to rustls,
/// whose answers to a bad ClientHello may name another alert than Go's.
fn go_opening_refusal(header: &[u8]) -> Option<(Vec<u8>, &'static str)> {
    const HTTP_STARTS: [&[u8; 5]; 5] = [b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"];
    const HTTP_ANSWER: &[u8] = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
    const ALERT: u8 = 0x15;
    const HANDSHAKE: u8 = 0x16;
    let alert = |description: u8| vec![ALERT, 3, 1, 0, 2, 2, description];
    let version = u16::from_be_bytes([header[1], header[2]]);
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if header[0] == 0x80 {
        return Some((alert(70), "unsupported SSLv2 handshake received"));
    }
    if (header[0] != ALERT && header[0] != HANDSHAKE) || version >= 0x1000 {
        if HTTP_STARTS.iter().any(|start| &header[..RECORD_HEADER] == *start) {
            return Some((HTTP_ANSWER.to_vec(), "client sent an HTTP request to an HTTPS server"));
        }
        return Some((Vec::new(), "first record does not look like a TLS handshake"));
    }
    if len > MAX_RECORD - RECORD_HEADER {
        return Some((alert(22), "oversized record received"));
    }
    // Read whole (see go_judges_after): unprotected, it is plaintext, which
    // may not pass 16 KiB.
    if len > MAX_PLAINTEXT {
        return Some((alert(22), "record overflow"));
    }
    None
}

/// How much of the opening (`front`, what has been read) Go reads before
/// [`go_opening_refusal`]'s judgement: the record header, and the whole
/// first record when its header passes but its length is over the plaintext
/// limit (Go checks that only once the record is in).
fn go_judges_after(front: &[u8]) -> usize {
    let Some(header) = front.get(..RECORD_HEADER) else { return RECORD_HEADER };
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    let passes_the_header = matches!(header[0], 0x15 | 0x16)
        && u16::from_be_bytes([header[1], header[2]]) < 0x1000
        && len <= MAX_RECORD - RECORD_HEADER;
    if passes_the_header && len > MAX_PLAINTEXT { RECORD_HEADER + len } else { RECORD_HEADER }
}

/// Appends what `encode` writes to `out`, first offering `room` bytes and
/// then the size rustls asks for when that does not fit (`Ok(Err(required))`).
fn encode_into(
    out: &mut Vec<u8>,
    mut room: usize,
    mut encode: impl FnMut(&mut [u8]) -> io::Result<Result<usize, usize>>,
) -> io::Result<()> {
    let start = out.len();
    loop {
        out.resize(start + room, 0);
        let result = encode(&mut out[start..]);
        match result {
            Ok(Ok(n)) => {
                out.truncate(start + n);
                return Ok(());
            }
            Ok(Err(required)) if required > room => room = required,
            Ok(Err(_)) => {
                out.truncate(start);
                return Err(invalid_data("TLS encoding did not fit the size rustls asked for"));
            }
            Err(err) => {
                out.truncate(start);
                return Err(err);
            }
        }
    }
}

/// A record's encoding as [`encode_into`] takes it.
fn encoded(result: Result<usize, EncodeError>) -> io::Result<Result<usize, usize>> {
    match result {
        Ok(n) => Ok(Ok(n)),
        Err(EncodeError::InsufficientSize(short)) => Ok(Err(short.required_size)),
        // Encoded already: nothing more to add.
        Err(EncodeError::AlreadyEncoded) => Ok(Ok(0)),
    }
}

/// Room for `len` bytes of plaintext as records: each record's header,
/// content type, nonce and tag are under 64 bytes in any suite.
fn sealed_size(len: usize) -> usize {
    len + (len / 16_384 + 1) * 64
}

/// An encryption's outcome as [`encode_into`] takes it.
fn encrypted(result: Result<usize, EncryptError>) -> io::Result<Result<usize, usize>> {
    match result {
        Ok(n) => Ok(Ok(n)),
        Err(EncryptError::InsufficientSize(short)) => Ok(Err(short.required_size)),
        Err(err) => Err(invalid_data(err)),
    }
}

fn invalid_data(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err)
}

fn handshake_eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof")
}

#[cfg(test)]
mod tests;
