//! The HTTP/1.1 front: watch requests answered by watchmux's own writer,
//! everything else by hyper's HTTP/1.1 server.
//!
//! hyper keeps an 8 KiB read buffer and an 8 KiB write buffer for every
//! HTTP/1.1 connection while a response streams, and no option of its frees
//! them; over HTTP/1.1 a client holds one connection per watch, so an idle
//! watcher cost about 18 KiB, 16 of them hyper's buffers. Here the front
//! reads each request head itself (see [`head`]) into a buffer it frees
//! once the head is parsed. A watch (a `GET` without a body, see
//! [`head::Head::Watch`]) goes to the handler and its answer is written by
//! [`response`] straight to the socket: the head as hyper would write it,
//! each frame as one chunk in one vectored write, nothing buffered in
//! between. While the answer streams, a read into a few bytes on the stack
//! notices the client closing (as hyper's does), and bytes a client
//! pipelines behind the watch are kept for the next request.
//!
//! At the first request that is not a watch the whole connection goes to
//! hyper, with the bytes read so far replayed ([`Rewind::replaying`]), and
//! stays there: the front never takes a connection back. A client that keeps
//! re-watching on its connection (client-go and kube-rs do, after each
//! `timeoutSeconds`) stays at the front.
//!
//! Connection handling follows hyper's: a head must arrive within
//! `HEADER_READ_TIMEOUT` of the front starting to wait for it (an idle
//! keep-alive connection included); once shutdown begins an idle connection
//! is closed, and a response still to be written says `connection: close`.

mod head;
mod response;

use std::io;
use std::time::{Duration, SystemTime};

use bytes::Buf;
use http::Response;
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Conn, HEADER_READ_TIMEOUT, Handler, connection_error};
use crate::body::{BoxError, ProxyBody};
use crate::server::connection::opening::Rewind;
use crate::server::lifecycle::shutdown;
use head::{Head, MAX_HEAD_BYTES};
use response::{BodyLength, ChunkSize, EncodedHead, Encoder, HeadError};

/// How long closing a connection (a TLS close_notify, a FIN) may take
/// before the socket is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// The read that watches for the client's close while an answer is made or
/// streams: bytes beyond this many per read are read by the next one.
const CLOSE_PROBE_BYTES: usize = 64;

/// How long a connection whose shutdown began while it waited for a request
/// is read for one already on its way, before it is closed: bytes a client
/// sent before it learnt of the shutdown arrive at once.
const SENT_BEFORE_SHUTDOWN: Duration = Duration::from_millis(100);

/// Serves an HTTP/1.1 connection from its first request.
pub(super) async fn serve<I, H>(conn: Conn<H>, mut io: Rewind<I>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    // Bytes read and not yet served: a head being read, or a request
    // pipelined behind a watch. Empty (unallocated) while a watch streams.
    let mut read = Vec::new();
    loop {
        let head = tokio::select! {
            () = conn.watcher.on_shutdown() => None,
            head = tokio::time::timeout(HEADER_READ_TIMEOUT, head::read_head(&mut io, &mut read)) => Some(head),
        };
        // Shutdown began while waiting: a request already sent (pipelined
        // behind the watch it ended) is read, to be refused below; an idle
        // connection closes.
        let head = match head {
            Some(head) => head,
            None => match tokio::time::timeout(SENT_BEFORE_SHUTDOWN, head::read_head(&mut io, &mut read)).await {
                Ok(head) => Ok(head),
                Err(_) => return,
            },
        };
        let req = match head {
            Err(_) => return connection_error(conn.name, "http", &"no request head within the header read timeout"),
            Ok(Err(err)) => return connection_error(conn.name, "http", &err),
            Ok(Ok(Head::Closed)) => return,
            Ok(Ok(Head::Other)) => return conn.serve_with_hyper_http1(io.replaying(read)).await,
            Ok(Ok(Head::Watch(req))) => req,
        };

        // A watch read once shutdown began (pipelined behind one the
        // shutdown ended, or sent just after it) is refused as the API
        // server refuses it, and the connection closed.
        if conn.watcher.shutdown_begun() {
            let refused = shutdown::refusal(req.version());
            if let Err(err) = write_response(&mut io, refused, false, &mut read).await {
                connection_error(conn.name, "http", &err);
            }
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, io.shutdown()).await;
            return;
        }
        // Boxed, as in hyper's service: the handler's future is large and
        // lives only until it has answered.
        let answer = Box::pin(conn.handler.handle(*req, conn.peer.clone()));
        let resp = tokio::select! {
            resp = answer => resp,
            () = client_gone(&mut io, &mut read) => return,
        };
        let keep_alive = !conn.watcher.shutdown_begun();
        match write_response(&mut io, resp, keep_alive, &mut read).await {
            Ok(Written::KeepAlive) => {}
            Ok(Written::Close) => {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, io.shutdown()).await;
                return;
            }
            Ok(Written::ClientGone) => return,
            Err(err) => return connection_error(conn.name, "http", &err),
        }
    }
}

/// How a response ended.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    /// Whole; the connection takes another request.
    KeepAlive,
    /// Whole; the connection closes.
    Close,
    /// The client closed the connection while it streamed.
    ClientGone,
}

#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("response head")]
    Head(#[from] HeadError),
    #[error("writing to the client")]
    Io(#[from] io::Error),
    #[error("response body")]
    Body(#[source] BoxError),
    #[error("response body shorter than its content-length")]
    ShortBody,
}

/// Writes `resp`, the answer to a `GET`, framed as hyper frames it.
async fn write_response<IO>(
    io: &mut IO,
    resp: Response<ProxyBody>,
    keep_alive: bool,
    read: &mut Vec<u8>,
) -> Result<Written, WriteError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let (mut parts, mut body) = resp.into_parts();
    let length = if body.is_end_stream() {
        BodyLength::Empty
    } else {
        body.size_hint().exact().map_or(BodyLength::Unknown, BodyLength::Known)
    };
    let EncodedHead { bytes, mut encoder, last } =
        response::encode_head(&mut parts, length, keep_alive, || httpdate::fmt_http_date(SystemTime::now()))?;
    drop(parts);
    io.write_all(&bytes).await?;
    drop(bytes);
    io.flush().await?;

    loop {
        if encoder == Encoder::Length(0) {
            break;
        }
        let frame = tokio::select! {
            biased;
            frame = body.frame() => frame,
            () = client_gone(io, read) => return Ok(Written::ClientGone),
        };
        let data = match frame {
            None => break,
            Some(Err(err)) => return Err(WriteError::Body(err)),
            // Trailers are not sent: hyper sends them only to a client
            // that asked with `TE: trailers`, and no watch has any.
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if data.has_remaining() => data,
                _ => continue,
            },
        };
        match &mut encoder {
            Encoder::Chunked => {
                let mut framed = ChunkSize::new(data.remaining()).chain(data).chain(&b"\r\n"[..]);
                io.write_all_buf(&mut framed).await?;
            }
            Encoder::Length(left) => {
                // More than the length owed is cut off, as hyper cuts it.
                let n = data.remaining().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                io.write_all_buf(&mut data.take(n)).await?;
            }
        }
        io.flush().await?;
    }
    match encoder {
        Encoder::Chunked => io.write_all(b"0\r\n\r\n").await?,
        Encoder::Length(0) => {}
        Encoder::Length(_) => return Err(WriteError::ShortBody),
    }
    io.flush().await?;
    Ok(if last { Written::Close } else { Written::KeepAlive })
}

/// Completes when the client closes the connection (or it fails). Bytes it
/// sends meanwhile, a request pipelined behind this one, are kept in
/// `read`; past [`MAX_HEAD_BYTES`] of them it stops reading, as hyper stops
/// at its buffer's limit, and the close goes unnoticed until a write fails.
async fn client_gone<IO: AsyncRead + Unpin>(io: &mut IO, read: &mut Vec<u8>) {
    let mut probe = [0u8; CLOSE_PROBE_BYTES];
    while read.len() < MAX_HEAD_BYTES {
        match io.read(&mut probe).await {
            Ok(0) | Err(_) => return,
            Ok(n) => read.extend_from_slice(&probe[..n]),
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests;
