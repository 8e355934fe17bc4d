//! Reading watch streams line by line, with as little work per byte as the
//! load generator can get away with (it reads every byte every watcher gets).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

/// The index of the first `\n` in `hay`, eight bytes at a time.
pub fn find_newline(hay: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const PAT: u64 = LO * b'\n' as u64;
    let mut chunks = hay.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes")) ^ PAT;
        // The lowest set bit marks the first zero byte of w exactly.
        let zero = w.wrapping_sub(LO) & !w & HI;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&b| b == b'\n').map(|p| at + p)
}

fn digits_after(hay: &[u8], at: usize) -> Option<u64> {
    let digits = &hay[at..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// The last `"seq":"<digits>"` in a line: the writer's sequence number
/// (ConfigMap `data` is the object's last field and `seq` its last key).
pub fn find_seq(line: &[u8]) -> Option<u64> {
    const NEEDLE: &[u8] = b"\"seq\":\"";
    let at = line.windows(NEEDLE.len()).rposition(|w| w == NEEDLE)? + NEEDLE.len();
    digits_after(line, at)
}

/// The first `"resourceVersion":"<digits>"` in a line: an event's object's
/// (or a list's, for a LIST body, whose metadata comes before its items).
pub fn find_rv(line: &[u8]) -> Option<u64> {
    const NEEDLE: &[u8] = b"\"resourceVersion\":\"";
    let at = line.windows(NEEDLE.len()).position(|w| w == NEEDLE)? + NEEDLE.len();
    digits_after(line, at)
}

/// How a watch stream stopped being read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The bench stopped it.
    Cancelled,
    /// The server ended it cleanly.
    Ended,
    /// A transport error.
    Error(String),
}

/// A reading speed for slow clients, shared by the watchers it slows; off,
/// they read as fast as they can.
#[derive(Debug)]
pub struct Pace {
    pub bytes_per_sec: f64,
    pub on: AtomicBool,
}

impl Pace {
    pub fn new(bytes_per_sec: f64) -> Arc<Self> {
        Arc::new(Self { bytes_per_sec, on: AtomicBool::new(true) })
    }
}

/// A body read no faster than its [`Pace`]: after each frame it waits as
/// long as the frame's bytes take at that speed before taking the next. A
/// frame not taken holds the stream's flow-control window (HTTP/2) or the
/// socket's buffers (HTTP/1.1), so the server feels a slow reader.
pub struct Paced<B> {
    inner: B,
    pace: Option<Arc<Pace>>,
    wait: Option<Pin<Box<Sleep>>>,
}

impl<B> Paced<B> {
    pub fn new(inner: B, pace: Option<Arc<Pace>>) -> Self {
        Self { inner, pace, wait: None }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Paced<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(wait) = &mut self.wait {
            ready!(wait.as_mut().poll(cx));
            self.wait = None;
        }
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let (Some(Ok(f)), Some(pace)) = (&frame, &self.pace)
            && pace.on.load(Ordering::Relaxed)
            && let Some(data) = f.data_ref()
        {
            let secs = data.len() as f64 / pace.bytes_per_sec;
            self.wait = Some(Box::pin(tokio::time::sleep(Duration::from_secs_f64(secs))));
        }
        Poll::Ready(frame)
    }
}

/// Reads `body` until `stop`, its end or an error, calling `on_line` for every
/// complete line with the time its frame arrived.
pub async fn read_lines<B>(mut body: B, stop: &CancellationToken, mut on_line: impl FnMut(&[u8], Instant)) -> End
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut buf = BytesMut::new();
    loop {
        let frame = tokio::select! {
            biased;
            _ = stop.cancelled() => return End::Cancelled,
            f = body.frame() => f,
        };
        let data = match frame {
            None => return End::Ended,
            Some(Err(e)) => return End::Error(format!("{e:#}")),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        let now = Instant::now();
        if buf.is_empty() {
            // The common case: the frame holds whole lines; no copy.
            let mut rest: &[u8] = &data;
            while let Some(end) = find_newline(rest) {
                on_line(&rest[..end], now);
                rest = &rest[end + 1..];
            }
            buf.extend_from_slice(rest);
        } else {
            buf.extend_from_slice(&data);
            while let Some(end) = find_newline(&buf) {
                let line = buf.split_to(end + 1);
                on_line(&line[..end], now);
            }
        }
    }
}

/// The fast searches agree with the obvious ones (run at start by each bench).
pub fn self_check() {
    use rand::Rng;
    let mut rng = rand::rng();
    for _ in 0..2000 {
        let len = rng.random_range(0..100);
        let hay: Vec<u8> = (0..len).map(|_| if rng.random_bool(0.03) { b'\n' } else { rng.random() }).collect();
        assert_eq!(find_newline(&hay), hay.iter().position(|&b| b == b'\n'), "{hay:?}");
    }
    let line = br#"{"type":"MODIFIED","object":{"metadata":{"resourceVersion":"42"},"data":{"pad":"x","seq":"17"}}}"#;
    assert_eq!(find_seq(line), Some(17));
    assert_eq!(find_rv(line), Some(42));
}
