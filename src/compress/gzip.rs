//! [`GzipBody`]: a body compressed as it is read, one gzip member per burst.
//!
//! The inner body's chunks (an object's shared encoded bytes among them)
//! are fed to the compressor where they lie; nothing is copied first. A
//! member is closed when the inner body has nothing ready (a watch waiting
//! for its next event) or ends, as kube-apiserver closes its gzip writer on
//! every flush of a watch-list; a complete body is therefore one member. A
//! concatenation of members is one gzip stream (RFC 1952 §2.2), read whole
//! by Go's `gzip.Reader` and by zlib.
//!
//! Compressed output goes out every [`EMIT_AT`] bytes, so a large LIST
//! streams instead of being compressed whole in one poll, and one poll
//! compresses a bounded amount.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use flate2::{Compress, CompressError, Compression, Crc, FlushCompress, Status};
use http_body::{Body, Frame};
use parking_lot::Mutex;

use crate::body::{BoxError, Chunk, ProxyBody};

/// Compressed bytes gathered before they are sent.
const EMIT_AT: usize = 32 * 1024;
/// The API server's `gzipContentEncodingLevel`: least CPU, within 1.1 to
/// 1.5 times the size of the best level.
const LEVEL: u32 = 1;
/// The gzip member header Go writes at level 1: magic, deflate, no flags,
/// no time, XFL 4 ("fastest"), OS unknown.
const MEMBER_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff];
/// Idle compressors kept for reuse (each holds a few hundred KiB of state:
/// allocating and freeing one per member of a busy watch would cost more
/// than compressing its event).
const POOL_CAPACITY: usize = 16;

static POOL: Mutex<Vec<Compress>> = Mutex::new(Vec::new());

fn take_compressor() -> Compress {
    POOL.lock().pop().unwrap_or_else(|| Compress::new(Compression::new(LEVEL), false))
}

fn return_compressor(mut deflate: Compress) {
    deflate.reset();
    let mut pool = POOL.lock();
    if pool.len() < POOL_CAPACITY {
        pool.push(deflate);
    }
}

/// One open gzip member.
struct Member {
    deflate: Compress,
    crc: Crc,
}

/// A body compressed as it is read; see the module doc.
pub(crate) struct GzipBody {
    inner: ProxyBody,
    member: Option<Member>,
    /// Compressed bytes not sent yet.
    out: Vec<u8>,
    /// A non-data frame (trailers) held until the bytes before it are sent.
    held: Option<Frame<Chunk>>,
    inner_done: bool,
}

impl GzipBody {
    pub(crate) fn new(inner: ProxyBody) -> Self {
        Self { inner, member: None, out: Vec::new(), held: None, inner_done: false }
    }

    fn feed(&mut self, mut chunk: Chunk) -> Result<(), CompressError> {
        // No member for nothing: an empty frame starts no gzip member.
        if !chunk.has_remaining() {
            return Ok(());
        }
        let member = self.member.get_or_insert_with(|| {
            self.out.extend_from_slice(&MEMBER_HEADER);
            Member { deflate: take_compressor(), crc: Crc::new() }
        });
        while chunk.has_remaining() {
            let part = chunk.chunk();
            member.crc.update(part);
            deflate_into(&mut member.deflate, part, &mut self.out, FlushCompress::None)?;
            let n = part.len();
            chunk.advance(n);
        }
        Ok(())
    }

    /// Ends the open member, if any: the rest of its deflate stream, then
    /// its CRC-32 and length. `flush_first` (a burst of a stream, not the
    /// end of a body) ends the data with an empty stored block before the
    /// final one, as Go's writer does on `Flush` before `Close`: Go's
    /// `gzip.Reader` hands out a member's last bytes only with its end and
    /// then waits for the next member's header, so without that block a
    /// client-go watch would not see an event until the next one arrived.
    fn close_member(&mut self, flush_first: bool) -> Result<(), CompressError> {
        let Some(mut member) = self.member.take() else {
            return Ok(());
        };
        let mut finished = Ok(());
        if flush_first {
            finished = deflate_into(&mut member.deflate, &[], &mut self.out, FlushCompress::Sync);
        }
        if finished.is_ok() {
            finished = deflate_into(&mut member.deflate, &[], &mut self.out, FlushCompress::Finish);
        }
        if finished.is_ok() {
            self.out.extend_from_slice(&member.crc.sum().to_le_bytes());
            self.out.extend_from_slice(&member.crc.amount().to_le_bytes());
        }
        return_compressor(member.deflate);
        finished
    }

    fn take_out(&mut self) -> Frame<Chunk> {
        Frame::data(Chunk::from(Bytes::from(std::mem::take(&mut self.out))))
    }
}

impl Drop for GzipBody {
    fn drop(&mut self) {
        if let Some(member) = self.member.take() {
            return_compressor(member.deflate);
        }
    }
}

/// Compresses all of `input` (and, with `Finish`, ends the stream), growing
/// `out` as needed.
fn deflate_into(
    deflate: &mut Compress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> Result<(), CompressError> {
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(EMIT_AT.max(input.len() / 2));
        }
        let read_before = deflate.total_in();
        let status = deflate.compress_vec(input, out, flush)?;
        input = &input[(deflate.total_in() - read_before) as usize..];
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            // Flushed once everything is out and deflate had room to spare.
            FlushCompress::Sync => input.is_empty() && out.len() < out.capacity(),
            _ => input.is_empty(),
        };
        if done {
            return Ok(());
        }
        // Otherwise the output was full: the next round has room again.
    }
}

impl Body for GzipBody {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if this.out.len() >= EMIT_AT {
                return Poll::Ready(Some(Ok(this.take_out())));
            }
            if this.inner_done {
                if !this.out.is_empty() {
                    return Poll::Ready(Some(Ok(this.take_out())));
                }
                return Poll::Ready(this.held.take().map(Ok));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(chunk) => this.feed(chunk)?,
                    // Trailers end the data: everything before them first.
                    Err(trailers) => {
                        this.close_member(false)?;
                        this.held = Some(trailers);
                        this.inner_done = true;
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    this.close_member(false)?;
                    this.inner_done = true;
                }
                Poll::Pending => {
                    // Nothing more ready: what was written goes out now, as
                    // the API server flushes a watch when its queue is empty.
                    this.close_member(true)?;
                    if this.out.is_empty() {
                        return Poll::Pending;
                    }
                    return Poll::Ready(Some(Ok(this.take_out())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner_done && self.out.is_empty() && self.held.is_none()
    }
}
